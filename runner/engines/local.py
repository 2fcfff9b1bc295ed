"""The local engine: the job as one detached ``hsx-runner run`` on this box.

The job's lock says whether a runner lives and which pid it is; signals do the rest
(SIGTERM drains and stops it, SIGUSR1 wakes a paused one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ..contract import timing
from ..contract.checks import refusal
from ..contract.errors import StatusError
from ..contract.replies import OK, REFUSED, Reply
from ..contract.status import StatusRecord
from ..job import detach, view
from ..output import lock
from ..output.ranks import RunPaths
from .base import Engine


class LocalEngine(Engine):
    def start(self, force: bool = False) -> Reply:
        return self._spawn(False, force)

    def resume(self, force: bool = False) -> Reply:
        return self._spawn(True, force)

    def _spawn(self, resume: bool, force: bool) -> Reply:
        out = self.out
        held, pid = lock.is_held(out)
        verb = "resume" if resume else "start"
        if held:
            phase = view.current(out).phase.value
            if resume and pid and phase == "paused":
                os.kill(pid, signal.SIGUSR1)  # a paused runner re-checks its disk now
                msg = f"runner pid {pid} is paused; asked it to re-check the disk and continue"
                return Reply({"ok": True, "started": False, "woken": True, "pid": pid}, msg)
            # "Done" is written before the runner stops its server (SGLang: seconds) and exits.
            why = (f"nothing to do: the job is done (its runner, pid {pid}, is exiting)" if phase == "done"
                   else f"already running (pid {pid})")  # fmt: skip
            return Reply({"started": False, "pid": pid, "reason": why}, why, REFUSED)
        if resume and (msg := self.nothing_to_resume()):
            return Reply({"started": False, "reason": msg}, msg, REFUSED)
        from ..job.preflight import GATES, gate, preflight

        report = preflight(self.cfg)
        blocked = gate(report, force)
        if blocked:
            msg = refusal("preflight refused the start", blocked)
            return Reply(
                {"started": False, "reason": msg, "preflight": report}, msg + "\n(--force skips it)", REFUSED
            )
        skipped = [c["name"] for c in report["checks"] if c["name"] in GATES and not c["ok"]]
        argv = [sys.executable, "-m", "runner.cli", "run", "--config", self.cfg.path]
        p = detach.spawn(argv, RunPaths(out).crash_log)  # what it prints as it dies lands in the crash log
        # Answer once the child has claimed its record and got through set-up (or failed in it),
        # so a start that dies at once says why instead of "started".
        claimed = detach.wait_claim(p, lambda: lock.is_held(out) == (True, p.pid), timing.current().claim_s)
        if claimed:
            return self._settled(p, verb, skipped)
        if claimed is None:
            why = f"runner did not take the lock within {timing.current().claim_s:g}s"
            return Reply({"started": False, "pid": p.pid, "reason": why}, "runner slow to start", REFUSED)
        held, hpid = lock.is_held(out)
        reason = (
            f"already running (pid {hpid})" if held else f"runner exited with code {p.returncode}; see logs"
        )
        return Reply({"started": False, "pid": hpid, "reason": reason}, reason, REFUSED)

    def _settled(self, p: subprocess.Popen, verb: str, forced: list[str]) -> Reply:
        """The runner holds the job: wait until its set-up passed, or report its failure."""
        out = self.out
        word = "resumed" if verb == "resume" else "started"
        extra = {"forced": forced} if forced else {}
        note = f" (preflight skipped with --force: {', '.join(forced)})" if forced else ""
        started = Reply(
            {"started": True, "pid": p.pid, "verb": verb, **extra}, f"{word}: runner pid {p.pid}{note}"
        )
        deadline = time.monotonic() + timing.current().settle_s  # config, model, dataset, tokenizer
        while True:
            try:
                rec = view.current(out)
            except StatusError:  # a corrupt record the child has not rewritten yet
                if time.monotonic() > deadline:
                    return started
                time.sleep(timing.current().answer_poll_s)
                continue
            if rec.pid == p.pid and rec.phase.value == "failed":
                why = f"{rec.failed_in or rec.phase.value}: {rec.reason}" + (
                    f" — {rec.hint}" if rec.hint else ""
                )
                msg = f"the runner failed at once in {why}"
                return Reply(
                    {"started": False, "pid": p.pid, "reason": msg, "failed_in": rec.failed_in}, msg, REFUSED
                )
            past_setup = rec.pid == p.pid and rec.phase.value not in ("preflight",)
            if past_setup or time.monotonic() > deadline:
                return started
            if p.poll() is not None and not lock.is_held(out)[0]:
                msg = f"the runner exited with code {p.returncode} at once: {rec.reason or 'see /extract logs --crash'}"
                return Reply({"started": False, "pid": p.pid, "reason": msg}, msg, REFUSED)
            time.sleep(timing.current().answer_poll_s)

    def stop(self, wait: float) -> Reply:
        held, pid = lock.is_held(self.out)
        if not held or not pid:
            return Reply({"stopped": False, "reason": "not running"}, "not running", REFUSED)
        gone = detach.stop(pid, lambda: lock.is_held(self.out)[0], wait)
        msg = f"runner pid {pid} stopped" if gone else f"SIGTERM sent to pid {pid}; still draining"
        return Reply(
            {"stopped": gone, "pid": pid, "signalled": True, "reason": None if gone else "draining"}, msg, OK
        )

    def status(self) -> StatusRecord:
        return view.current(self.out)
