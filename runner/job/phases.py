"""One run of a job, phase by phase: preflight, starting_server, self_test, extracting,
then done / failed / stopped. Holds the lock for its whole life and keeps the record true."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from ..contract.config import Config, require_job
from ..contract.errors import ConfigError, JobFailed, ServerError
from ..contract.status import HANDOFF_PENDING, Phase
from ..data import layers, lengths
from ..data.dataset import Dataset, open_dataset
from ..output import compact, ranks
from ..output.lock import JobLock
from ..output.store import Store, describe
from ..serve.selftest import self_test
from ..serve.server import Server
from . import requeue
from .disk import DiskGuard, worst_case_bytes
from .record import Recorder, claim_record
from .view import tail

log = logging.getLogger("hsx.job")


def setup_logging(path: str) -> None:
    """The hsx loggers write to this run's log (RunPaths.runner_log)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("hsx")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


# What to do when a phase after set-up fails (set-up steps carry their own).
PHASE_HINTS = {
    Phase.PREFLIGHT.value: "see /extract logs",
    Phase.STARTING_SERVER.value: "the server did not come up: /extract logs --server shows why; check [server]",
    Phase.SELF_TEST.value: "the dump path is broken: /extract logs --server shows the server's side",
    Phase.EXTRACTING.value: "see /extract logs; resume retries the failed samples",
}
TAIL_LINES = 12


class StepFailed(JobFailed):
    """A named set-up step failed; ``hint`` says what to do."""

    def __init__(self, step: str, reason: str, hint: str):
        super().__init__(f"{step}: {reason}")
        self.step, self.reason, self.hint = step, reason, hint


def _step(name: str, hint: str, fn, *args):
    try:
        return fn(*args)
    except Exception as e:
        log.exception("%s failed", name)  # the traceback goes to the runner log (its tail)
        raise StepFailed(name, str(e) or type(e).__name__, hint) from None


class Job:
    def __init__(self, cfg: Config, rank: int | None = None, world: int | None = None):
        self.cfg = cfg = ranks.own_port(cfg, rank)
        self.out = cfg.job.out
        self.rank, self.world = rank, world
        self.paths = ranks.RunPaths(self.out, rank)
        self.store = Store(self.out, rank, storage=cfg.job.storage)
        self.server: Server | None = None
        self.extractor = None
        self._stop_requested = False
        self._main: asyncio.Task | None = None

    def request_stop(self) -> None:
        """SIGTERM/SIGINT: drain while extracting; otherwise cancel what is in progress."""
        if self._stop_requested:
            return
        self._stop_requested = True
        log.info("stop requested")
        if self.extractor is not None:
            self.extractor.stop()
        elif self._main is not None:
            self._main.cancel()

    def _setup(self):
        """The steps before any server starts, each named, so a failure says which one."""
        cfg, job = self.cfg, self.cfg.job
        _step("config", "fix the [job] keys it names", require_job, cfg)
        _step(
            "config", "read that code, then set [job] trust_remote_code = true", layers.check_remote_code, job
        )
        removed = self.store.prepare()
        compact.finish_unless_running(job.out)  # a killed compact's sample back in place first
        info = _step("model", f"check [job] model: {job.model}/config.json must be readable",
                     layers.model_info, job.model)  # fmt: skip
        ds = _step("dataset", f"check [job] dataset: {job.dataset}", open_dataset, job, info["vocab_size"])
        try:
            _step("tokenizer", "check [job] tokenizer (and trust_remote_code for one with auto_map)",
                  ds.check_tokenizer)  # fmt: skip
            aux, aux_source = _step(
                "layers", "fix [job] aux_layer_ids / draft_config", layers.job_aux_ids, job, info
            )
            total = len(ds)
            lo, hi = (0, total) if self.rank is None else ranks.rank_range(total, self.rank, self.world)
            desc = describe(cfg, info, aux, aux_source, total, job.tokenizer)
            _step("dataset.json", "use a new [job] out, or the settings that wrote it", self.store.pin, desc)
        except BaseException:
            ds.close()
            raise
        return ds, aux, total, lo, hi, removed

    async def main(self) -> int:
        self._main = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        cfg = self.cfg
        recorder = Recorder(self.paths, cfg.job.name, 0, cfg.job.rate_window_s)
        recorder.carry_counts()  # the last run's numbers until the plan replaces them
        recorder.record.server.backend = cfg.server.backend
        self.recorder = recorder
        if self.rank is not None and (why := self._requeued()):
            recorder.phase(Phase.FAILED, why)
            return 1
        ds = None
        ticker = asyncio.create_task(self._tick())
        try:
            ds, aux, total, lo, hi, removed = self._setup()
            recorder.record.total = hi - lo
            away = compact.away(self.out)  # a running compact's sample between its two renames
            plan = self.store.plan(total, lo, hi, away)
            if plan.orphans:
                self.store.record_orphans(plan.orphans)
                plan = self.store.plan(total, lo, hi, away)
            recorder.set_done(len(plan.committed), len(plan.failed), self.store.mean_bytes(plan.committed))
            if removed:
                recorder.event("cleanup", removed_temp_files=removed)
            if self.rank is not None:
                log.info("rank %d of %d: samples %d..%d", self.rank, self.world, lo, hi - 1)
                recorder.event("rank", rank=self.rank, world=self.world, lo=lo, hi=hi)
            log.info(
                "plan: %d committed, %d failed, %d remaining",
                len(plan.committed),
                len(plan.failed),
                len(plan.remaining),
            )
            if not plan.remaining:
                self._done()
                return 0
            return await self._run(ds, plan.remaining, aux)
        except asyncio.CancelledError:
            recorder.phase(Phase.STOPPED, "stopped on request")
            return 0
        except StepFailed as e:
            self._failed(e.step, e.reason, e.hint, self.paths.runner_log)
            return 2 if e.step == "config" else 1
        except (JobFailed, ServerError, ConfigError) as e:
            step = recorder.record.phase.value
            self._failed(step, str(e), PHASE_HINTS.get(step, ""), self._log_for(step))
            return 1
        except Exception as e:
            log.exception("unexpected error")
            self._failed(recorder.record.phase.value, f"internal error: {type(e).__name__}: {e}",
                         "a defect in hsx: /extract logs --crash shows the traceback", self.paths.runner_log)  # fmt: skip
            return 1
        finally:
            ticker.cancel()
            if self.server is not None:
                await asyncio.to_thread(self.server.stop)
            if ds is not None:
                ds.close()
            recorder.record.alive = False
            recorder.write()

    def _log_for(self, step: str) -> str:
        return (
            self.paths.server_log
            if step in (Phase.STARTING_SERVER.value, Phase.SELF_TEST.value)
            else self.paths.runner_log
        )

    def _failed(self, step: str, reason: str, hint: str, log_path: str) -> None:
        """FAILED, with the step, the reason, what to do and the log lines that show it."""
        log.error("job failed in %s: %s", step, reason)
        record = self.recorder.record
        record.failed_in, record.hint, record.log_tail = (
            step,
            hint or None,
            [x[:300] for x in tail(log_path, TAIL_LINES)],
        )
        print(
            f"hsx-runner: failed in {step}: {reason}" + (f"\nwhat to do: {hint}" if hint else ""),
            file=sys.stderr,
        )
        record.last_error = f"{step}: {reason}"[:500]
        self.recorder.phase(Phase.FAILED, reason[:500])

    async def _run(self, ds: Dataset, remaining: list[int], aux: list[int]) -> int:
        from .extractor import Extractor

        cfg, recorder = self.cfg, self.recorder
        dump_dir = self.store.tmp
        self.server = Server(cfg, aux, dump_dir, self.paths)
        recorder.phase(Phase.STARTING_SERVER)
        await self.server.bring_up(recorder)
        recorder.phase(Phase.SELF_TEST)
        hidden = layers.model_info(cfg.job.model)["hidden_size"]
        tokens = await self_test(self.server, ds, remaining, dump_dir, cfg.job, hidden)
        recorder.event("self_test", ok=True, tokens=tokens)
        recorder.phase(Phase.EXTRACTING)
        self.extractor = Extractor(cfg, ds, self.store, recorder, self.server, dump_dir)
        self.extractor.guard = DiskGuard(
            self.out,
            recorder,
            cfg.job.min_free_bytes,
            cfg.job.concurrency,
            worst_case_bytes(cfg.job.max_length, hidden),
            cfg.job.storage,
        )
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, self.extractor.wake)
        if self._stop_requested:
            self.extractor.stop()
        recorder.remaining_tokens = self.extractor.remaining_tokens
        stop_lengths = lengths.in_background(cfg.job, ds.vocab_size, self.out,
                                             lambda got: setattr(self.extractor, "lengths", got))  # fmt: skip
        try:
            await self.extractor.run(remaining)
        finally:
            stop_lengths.set()
        if self._stop_requested:
            recorder.phase(Phase.STOPPED, "stopped on request")
            return 0
        if self.extractor.transient_failed:
            n = self.extractor.transient_failed
            recorder.phase(Phase.FAILED, f"{n} samples failed after retries; resume to retry them")
            return 1
        self._done()
        return 0

    def _requeued(self) -> str | None:
        """A Slurm rank's requeues so far and why, in its record; why it stops when they are past
        ``[cluster] max_requeues`` or the last two came with nothing done between."""
        n, rec = requeue.count(), self.recorder.record
        last = rec.requeued_from
        rec.requeued_from = rec.done if n else None  # done: the last run's, carried
        rec.requeues, rec.requeued_for = n, requeue.why(os.path.join(self.out, ".slurm"), self.rank, n)
        return requeue.stop_reason(self.cfg, n, rec.done, last)

    def _done(self) -> None:
        """DONE; with [train] set, the record says first that this runner hands the features to
        training next (runner.train.handoff, once the lock is released), so no reader takes the
        done job's record for the end of the story."""
        if self.rank is None and self.cfg.train.python:
            self.recorder.record.handoff = HANDOFF_PENDING
        self.recorder.phase(Phase.DONE)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.job.status_interval_s)
            self.recorder.write()


def run(cfg: Config, rank: int | None = None, world: int | None = None) -> int:
    """The job in the foreground; with a rank, only that rank's samples (see runner.output.ranks)."""
    paths = ranks.RunPaths(cfg.job.out, rank)
    lock = JobLock(paths.lock)
    lock.acquire()  # LockedError names the running pid
    claim_record(paths.status, cfg.job.name)
    setup_logging(paths.runner_log)
    try:
        return asyncio.run(Job(cfg, rank, world).main())
    finally:
        lock.release()
