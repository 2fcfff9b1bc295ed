"""Writes complete samples into the dump directory on a few threads (the dump contract in
runner/dump.py): the data file through runner.ckpt.write_sample, then the sidecar.

The scheduler submits a sample and goes on; before the request's response is streamed it
waits for that request's write, so both files exist before the HTTP response is sent.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading

from runner import dump

from .capture import Sample

log = logging.getLogger("hsx.dump")
WAIT_TIMEOUT_S = 600.0  # a stuck filesystem must not hang the scheduler forever


def write_sample_files(dump_dir: str, sample: Sample) -> dict:
    """Write one sample synchronously; return the sidecar metadata."""
    from runner.ckpt import write_sample

    side = dump.sidecar_path(dump_dir, sample.rid)
    if os.path.exists(side):  # a sidecar must only ever describe the data file beside it
        os.remove(side)
    t = sample.tensors()
    nbytes, checksum = write_sample(dump.data_path(dump_dir, sample.rid), **t)
    meta = {
        "seq": len(sample.input_ids),
        "bytes": nbytes,
        "checksum": checksum,
        "hidden_size": int(t["hidden_state"].shape[-1]),
        "dtype": str(t["hidden_state"].dtype).removeprefix("torch."),
    }
    dump.write_sidecar(dump_dir, sample.rid, meta)
    return meta


class DumpWriter:
    def __init__(self, dump_dir: str, workers: int = 4):
        self.dump_dir = dump_dir
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="hsx-dump")
        self._pending: dict[str, list[concurrent.futures.Future]] = {}
        self._lock = threading.Lock()
        self.written = 0
        self.failed = 0

    def _run(self, sample: Sample) -> None:
        try:
            write_sample_files(self.dump_dir, sample)
            with self._lock:
                self.written += 1
        except Exception:
            with self._lock:
                self.failed += 1
            log.exception("hsx dump: writing %s failed; no sidecar, the extractor will retry", sample.rid)

    def submit(self, sample: Sample) -> None:
        fut = self._pool.submit(self._run, sample)
        with self._lock:
            self._pending.setdefault(sample.rid, []).append(fut)

    def has_pending(self) -> bool:
        return bool(self._pending)

    def wait(self, rids) -> None:
        """Block until the writes of these requests are done. Never raises."""
        with self._lock:
            futs = [f for rid in rids for f in self._pending.pop(rid, ())]
        if futs:
            _done, late = concurrent.futures.wait(futs, timeout=WAIT_TIMEOUT_S)
            if late:
                log.error(
                    "hsx dump: %d writes still running after %.0f s; responding anyway",
                    len(late),
                    WAIT_TIMEOUT_S,
                )

    def close(self) -> None:
        self._pool.shutdown(wait=True)
