"""Writes complete samples into the dump directory on writer threads (the dump contract in
runner/contract/dump.py): the data file through runner.codec.ckpt.write_sample, then the sidecar; or a
failure note with the reason, so the extractor knows at once.

The scheduler hands a sample over and goes on: nothing here runs on its loop but ``submit``.
At most ``max_pending`` samples wait or are being written (their rows stay in host memory
until written); past that ``submit`` blocks, which slows the scheduler to the disk's pace, but
never longer than ``wait_limit_s``, kept well below SGLang's watchdog (which would otherwise
kill the whole server over one slow filesystem): then that sample is dropped with a note.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading

from runner.contract import dump

from .capture import Sample

log = logging.getLogger("hsx.dump")
SGLANG_WATCHDOG_S = 300.0  # SGLang 0.5.23's --watchdog-timeout default


def wait_limit(watchdog_s: float | None) -> float:
    """How long the scheduler may block on a full queue: a quarter of the watchdog, at most 60 s."""
    return max(1.0, min(60.0, (watchdog_s or SGLANG_WATCHDOG_S) / 4))


def write_sample_files(dump_dir: str, sample: Sample, writer: str = "") -> dict:
    """Write one sample synchronously; return the sidecar metadata."""
    from runner.codec.ckpt import write_sample

    side = dump.sidecar_path(dump_dir, sample.rid)
    if os.path.exists(side):  # a sidecar must only ever describe the data file beside it
        os.remove(side)
    sample.finish()
    t = sample.tensors()
    dtype = dump.file_dtype() or str(t["hidden_state"].dtype).removeprefix("torch.")
    compress = dump.file_storage() == "ckpt.gz"  # gzip on this writer thread, never the scheduler's
    nbytes, checksum = write_sample(
        dump.data_path(dump_dir, sample.rid), **t, dtype=dtype, compress=compress,
        mantissa_bits=dump.file_mantissa_bits(),
    )  # fmt: skip
    meta = {
        "seq": len(sample.input_ids),
        "bytes": nbytes,
        "checksum": checksum,
        "hidden_size": int(t["hidden_state"].shape[-1]),
        "dtype": dtype,
        "writer": writer or f"pid {os.getpid()}",
    }
    dump.write_sidecar(dump_dir, sample.rid, meta)
    return meta


WRITER_NICE = 10


def _lower_priority() -> None:
    """Writer threads yield the CPU to the scheduler and the forward (Linux: per-thread nice)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICE)
    except (AttributeError, OSError):
        pass


class DumpWriter:
    def __init__(
        self,
        dump_dir: str,
        workers: int = 2,
        max_pending: int = 16,
        wait_limit_s: float = 60.0,
        name: str = "",
    ):
        self.dump_dir = dump_dir
        self.name = name or f"pid {os.getpid()}"
        self.wait_limit_s = wait_limit_s
        self._slots = threading.BoundedSemaphore(max_pending)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            workers, thread_name_prefix="hsx-dump", initializer=_lower_priority
        )
        self._lock = threading.Lock()
        self._futures: set[concurrent.futures.Future] = set()
        self.written = 0
        self.failed = 0

    def fail(self, rid: str, reason: str) -> None:
        with self._lock:
            self.failed += 1
        log.error("hsx dump: %s: %s; the extractor will retry", rid, reason)
        try:
            dump.write_failure(self.dump_dir, rid, reason)
        except (OSError, dump.DumpError):
            log.exception("hsx dump: %s: cannot write the failure note either", rid)

    def _run(self, sample: Sample) -> None:
        try:
            write_sample_files(self.dump_dir, sample, self.name)
            with self._lock:
                self.written += 1
        except Exception as e:  # every failure is reported to the extractor, none kills the server
            log.exception("hsx dump: writing %s failed", sample.rid)
            self.fail(sample.rid, f"{type(e).__name__}: {e}")
        finally:
            self._slots.release()

    def submit(self, sample: Sample) -> None:
        """Queue one sample; blocks while the queue is full, at most ``wait_limit_s``."""
        if not self._slots.acquire(timeout=self.wait_limit_s):
            self.fail(sample.rid, f"the dump queue stayed full for {self.wait_limit_s:g}s (disk too slow?)")
            return
        fut = self._pool.submit(self._run, sample)
        with self._lock:
            self._futures.add(fut)
        fut.add_done_callback(self._forget)

    def _forget(self, fut) -> None:
        with self._lock:
            self._futures.discard(fut)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued sample is written (tests, shutdown); True if all are."""
        with self._lock:
            futs = list(self._futures)
        _done, late = concurrent.futures.wait(futs, timeout=timeout)
        return not late

    def close(self) -> None:
        self._pool.shutdown(wait=True)
