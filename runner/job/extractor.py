"""The extractor: a bounded number of requests in flight so the server never idles, each
sample retried through tenacity on transient errors, committed atomically, or failed with
a reason. A server that dies is restarted (capped) and in-flight samples are retried."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid

import aiohttp
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from ..contract import dump, timing
from ..contract.errors import JobFailed, ServerError
from ..data.dataset import Dataset, RowError
from ..output.store import Store
from ..serve.server import Server
from .record import Recorder
from .served import died

log = logging.getLogger("hsx.extractor")


class Transient(Exception):
    """Worth retrying: connection trouble, timeouts, 5xx, a missing dump."""


class Permanent(Exception):
    """The server refused this sample; retrying would not help."""


class ServerDown(Exception):
    """The server process is gone; wait for the restart without spending an attempt."""


class Drained(Exception):
    """A stop came while this sample waited for a server the monitor will not start again: it
    stays remaining, for the next run."""


class Extractor:
    def __init__(
        self, cfg, dataset: Dataset, store: Store, recorder: Recorder, server: Server, dump_dir: str
    ):
        self.cfg = cfg
        self.ds = dataset
        self.store = store
        self.recorder = recorder
        self.server = server
        self.dump_dir = dump_dir
        self.nonce = uuid.uuid4().hex[:8]
        self.server_up = asyncio.Event()
        self.server_up.set()
        self.stopping = asyncio.Event()
        self.abort_reason: str | None = None
        self.space_ok = asyncio.Event()
        self.space_ok.set()
        self.guard = None  # a DiskGuard, set by the job
        self._wake = asyncio.Event()
        self.consecutive = 0
        self.transient_failed = 0
        self._queue: list[int] = []
        self.lengths = None  # every row's token count, once known (runner.data.lengths)

    def remaining_tokens(self) -> int | None:
        """Tokens still to extract (queued and in flight), or None until the lengths are known."""
        lengths = self.lengths
        if lengths is None:
            return None
        return sum(lengths[i] for i in self._queue) + sum(lengths[i] for i in list(self.recorder.in_flight))

    def stop(self) -> None:
        self.stopping.set()
        self.space_ok.set()  # release workers waiting for disk so they see the stop

    def wake(self) -> None:
        """Re-check the disk now (SIGUSR1, sent by `hsx-runner resume` to a paused runner)."""
        self._wake.set()

    def abort(self, reason: str) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
            log.error("stopping the job: %s", reason)
        self.stopping.set()
        self.server_up.set()  # release waiters so they see the abort
        self.space_ok.set()

    async def run(self, remaining: list[int]) -> None:
        self._queue = list(reversed(remaining))
        timeout = aiohttp.ClientTimeout(total=self.cfg.job.request_timeout_s)
        conn = aiohttp.TCPConnector(limit=self.cfg.job.concurrency + 2)
        async with aiohttp.ClientSession(timeout=timeout, connector=conn) as http:
            self.http = http
            monitor = asyncio.gather(self._monitor(), self._watch_disk())
            workers = [asyncio.create_task(self._worker()) for _ in range(self.cfg.job.concurrency)]
            try:
                await asyncio.gather(*workers)
            finally:
                monitor.cancel()
                for w in workers:
                    w.cancel()
                await asyncio.gather(monitor, *workers, return_exceptions=True)
        if self.abort_reason:
            raise JobFailed(self.abort_reason)

    async def _worker(self) -> None:
        while self._queue and not self.stopping.is_set():
            if self.guard is not None and self.space_ok.is_set() and not self.guard.ok():
                self.space_ok.clear()  # checked before every sample: statvfs is cheap
            if not self.space_ok.is_set():
                await self.space_ok.wait()
                continue
            idx = self._queue.pop()
            try:
                sample = self.ds.get(idx)
            except RowError as e:
                await asyncio.to_thread(self.store.fail, idx, f"bad row: {e}", 0, True)
                self.recorder.failed(idx, f"bad row: {e}", permanent=True)
                continue
            if sample.truncated:
                self.recorder.record.truncated += 1
            self.recorder.in_flight[idx] = time.monotonic()
            try:
                await self._extract(sample)
            except asyncio.CancelledError:
                raise
            except Drained:
                pass  # stopping: the sample stays remaining
            except Exception as e:  # noqa: BLE001 - any failure of one sample is recorded, not fatal
                self._sample_failed(sample.idx, e)
            else:
                self.consecutive = 0
            finally:
                self.recorder.in_flight.pop(idx, None)

    def _sample_failed(self, idx: int, e: Exception) -> None:
        if self.stopping.is_set() and self.abort_reason:
            self._queue.append(idx)  # not this sample's fault; stays remaining
            return
        permanent = isinstance(e, Permanent)
        cause = e.last_attempt.exception() if isinstance(e, RetryError) else e
        attempts = e.last_attempt.attempt_number if isinstance(e, RetryError) else 1
        reason = f"{type(cause).__name__}: {cause}"
        self.store.fail(idx, reason, attempts, permanent)
        self.recorder.failed(idx, reason, permanent)
        if not permanent:
            self.transient_failed += 1
        self.consecutive += 1
        limit = self.cfg.job.max_consecutive_failures
        if self.consecutive >= limit:
            self.abort(f"{self.consecutive} samples in a row failed; last: sample {idx}: {reason}")

    async def _extract(self, sample) -> None:
        body_ids, mask = sample.input_ids, sample.loss_mask
        attempt_no = 0
        t = timing.current()
        while True:
            try:
                async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(self.cfg.job.retries),
                    wait=wait_exponential_jitter(multiplier=t.backoff_initial_s, max=t.backoff_max_s),
                    retry=retry_if_exception_type(Transient),
                    reraise=False,
                    before_sleep=lambda rs, idx=sample.idx: log.warning(
                        "sample %d, attempt %d: %s; retrying", idx, rs.attempt_number, rs.outcome.exception()
                    ),
                ):
                    with attempt:
                        attempt_no += 1
                        await self._server_back()
                        if self.abort_reason:
                            raise JobFailed(self.abort_reason)
                        rid = f"s{sample.idx}-{self.nonce}-{attempt_no}"
                        try:
                            meta = await self._request(rid, body_ids, mask)
                        except (Transient, Permanent, ServerDown):
                            self._discard(rid)  # a failed attempt's dump must not fill the disk
                            raise
                        await asyncio.to_thread(self._commit, sample.idx, rid, meta)
                return
            except ServerDown:
                if self.stopping.is_set():
                    raise Drained from None  # no server is started again once asked to stop
                await self._server_back()
                if self.abort_reason:
                    raise JobFailed(self.abort_reason) from None

    async def _server_back(self) -> None:
        """Until the server is up; a stop ends the wait (Drained): the monitor starts no server
        once asked to stop, and a drain whose server died would wait for one forever."""
        if self.server_up.is_set():
            return
        waits = [asyncio.ensure_future(e.wait()) for e in (self.server_up, self.stopping)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if not self.server_up.is_set():
            raise Drained

    async def _request(self, rid: str, ids: list[int], mask: list[int]) -> dict:
        url = self.server.url + "/generate"
        try:
            async with self.http.post(url, json=dump.request_body(rid, ids, mask)) as r:
                if r.status >= 500:
                    raise Transient(f"server answered {r.status}: {(await r.text())[:300]}")
                if r.status >= 400:
                    raise Permanent(f"server refused ({r.status}): {(await r.text())[:300]}")
                await r.read()
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError) as e:
            if await died(self.http, self.server):  # its sockets close a moment before it ends
                raise ServerDown from None
            raise Transient(f"connection to server failed: {e}") from None
        except asyncio.TimeoutError:
            raise Transient(f"no answer within {self.cfg.job.request_timeout_s:g}s") from None
        try:
            meta = await dump.await_dump(self.dump_dir, rid, self.cfg.job.dump_wait_s, self.server.alive)
        except dump.DumpError as e:
            if not self.server.alive():
                raise ServerDown from None
            raise Transient(str(e)) from None
        if meta["seq"] != len(ids):
            raise Transient(f"dump has {meta['seq']} rows for {len(ids)} tokens")
        return meta

    def _discard(self, rid: str) -> None:
        dump.remove_dump(self.dump_dir, rid)

    def _sweep(self) -> None:
        """Dumps a server finished after we gave up on them: older than two timeouts, gone."""
        cutoff = time.time() - 2 * self.cfg.job.request_timeout_s
        try:
            entries = list(os.scandir(self.dump_dir))
        except FileNotFoundError:
            return
        for e in entries:
            try:
                if e.stat().st_mtime < cutoff:
                    os.unlink(e.path)
            except FileNotFoundError:
                pass

    def _commit(self, idx: int, rid: str, meta: dict) -> None:
        self.store.commit(
            idx,
            dump.data_path(self.dump_dir, rid),
            meta["seq"],
            meta["bytes"],
            meta["checksum"],
            writer=str(meta.get("writer", ""))[:80],
        )
        try:
            os.unlink(dump.sidecar_path(self.dump_dir, rid))
        except FileNotFoundError:
            pass
        started = self.recorder.in_flight.get(idx)
        self.recorder.extracted(meta["seq"], meta["bytes"], time.monotonic() - started if started else None)

    async def _monitor(self) -> None:
        cap = self.cfg.server.max_restarts
        while not self.stopping.is_set():
            await asyncio.sleep(timing.current().monitor_s)
            if self.server.alive():
                self.server.observe()
                continue
            self.server_up.clear()
            code = self.server.proc.returncode if self.server.proc else None
            why = f"server died (exit code {code})"
            rank = await asyncio.to_thread(self.server.death_reason)
            if self.stopping.is_set():  # the stop's signal reached the server too (Slurm's scancel)
                return
            if rank:
                why += f": {rank}"
            self.recorder.record.server.last_death = rank or f"the server exited with code {code}"
            if not await self.server.restart_allowed(self.recorder, why):
                self.abort(f"{why}, and the restart cap ({cap}) is spent")
                return
            if self.stopping.is_set():  # asked during the back-off: no server started for it
                return
            try:
                await asyncio.to_thread(self.server.stop, 5.0)
                await self.server.start()
                t0 = time.monotonic()
                await self.server.wait_ready(self._server_progress)
                log.info("server back after %.1fs", time.monotonic() - t0)
                self.recorder.record.server.pid = self.server.proc.pid if self.server.proc else None
                self.server_up.set()
            except ServerError as e:
                self.recorder.error(str(e))  # next loop sees it dead and counts another restart

    async def _watch_disk(self) -> None:
        """While paused, re-check every disk_recheck_s, or at once when woken (SIGUSR1)."""
        last_sweep = time.monotonic()
        while self.guard is not None and not self.stopping.is_set():
            if not self.space_ok.is_set() and self.guard.ok():
                self.space_ok.set()
            if time.monotonic() - last_sweep > timing.current().sweep_s:
                last_sweep = time.monotonic()
                await asyncio.to_thread(self._sweep)
            try:
                await asyncio.wait_for(self._wake.wait(), self.cfg.job.disk_recheck_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    def _server_progress(self) -> None:
        self.recorder.record.server.activity = self.server.activity
