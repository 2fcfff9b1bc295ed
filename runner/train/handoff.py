"""The extraction's hand-off to training: what the job's runner does once its job ended done
with ``[train]`` set and its lock is released (runner.cli run).

It verifies the features, unless verify's kept verdict still holds (runner.output.verified),
recorded as a background verify is (its progress in the status, its result posted), so that
a training start finds them verified; with ``[train] after_extraction`` (or a start arranged
once by ``train after-extraction``) it then starts the
training. What came of it replaces ``handoff = "pending"`` in the extraction's record, where
the watcher's done milestone reads it. Under a systemd service (the boot unit) the runner then
stays while the training runs, since systemd ends a unit's processes with its main one.
"""

from __future__ import annotations

import os
import time

from ..contract.errors import LockedError, StatusError
from ..contract.replies import OK
from ..contract.status import HANDOFF_PENDING, STATUS, Phase, read_record, write_record
from ..job import background
from ..output import verified
from ..output.lock import NAME, JobLock
from ..procs import proc_stat
from . import control

LAUNCH = "after_extraction"
SYSTEMD_SERVICE_ENV = "INVOCATION_ID"  # systemd sets it in every process of a unit it starts
OUTLIVE_POLL_S = 2.0


def _verify(cfg) -> str | None:
    """Verify now, unless the kept verdict holds; why the features are not fit to train (None: fit)."""
    from ..output.verify import verify

    out = cfg.job.out
    if verified.check(out)[0]:
        return None
    prog = background.claim(out, "verify", [])  # in this process: torch is loaded already
    if prog is None:
        bg = background.read(out) or {}
        return f"a background {bg.get('verb')} (pid {bg.get('pid')}) runs on {out}: verify when it is done"
    try:
        prog.finish(verify(cfg, progress=prog))
    except Exception as e:
        prog.finish(None, f"{type(e).__name__}: {e}")
        raise
    ok, detail, fix = verified.check(out)
    return None if ok else f"{detail} ({fix})"


def hand_off(cfg, start=control.start) -> tuple[str, int | None]:
    """Verify, then (after_extraction) start the training (``start``: the Slurm engine's submits
    a job): one line saying what came of it, and the training's supervisor pid when it started here.
    Whatever befalls it is said, never raised: the job is done either way."""
    try:
        return _hand_off(cfg, start)
    except Exception as e:  # noqa: BLE001 - said in the record; the job's exit stays 0
        return f"the hand-off to training failed: {type(e).__name__}: {e}", None


def _hand_off(cfg, start) -> tuple[str, int | None]:
    why = _verify(cfg)
    if why:
        return f"training not started: the features are not verified: {why}", None
    if not (
        cfg.train.after_extraction or control.arranged(cfg.job.out)
    ):  # `/train after-extraction` arranges it once
        return "features verified for training: `/train start` trains the draft", None
    reply = start(cfg)
    if reply.code == OK:
        return f"training started ({LAUNCH}): {reply.text}", reply.obj.get("supervisor_pid")
    return f"training not started ({LAUNCH}): {reply.text}", None


def _say(cfg, text: str) -> bool:
    """``text`` in place of the pending hand-off in this runner's record (False: not ours now)."""
    path = os.path.join(cfg.job.out, STATUS)
    lock = JobLock(os.path.join(cfg.job.out, NAME))
    try:
        lock.acquire()  # the record's one writer while it is changed
    except LockedError:
        return False  # a new run owns the record now; its own end says what it hands over
    try:
        rec = read_record(path)
        if rec.handoff != HANDOFF_PENDING or rec.pid != os.getpid():
            return False
        rec.handoff = text
        write_record(path, rec)
        return True
    finally:
        lock.release()


def _outlive(pid: int) -> None:
    """Stay until the training's supervisor ends: a systemd service's leftover processes are
    killed when its main one (this runner, under the boot unit) exits."""
    while (st := proc_stat(pid)) is not None and st[0] != "Z":
        time.sleep(OUTLIVE_POLL_S)


def run(cfg) -> str | None:
    """The hand-off when this runner's record asks for it; what it wrote there (None: not asked)."""
    try:
        rec = read_record(os.path.join(cfg.job.out, STATUS))
    except StatusError:
        return None
    if rec.phase is not Phase.DONE or rec.handoff != HANDOFF_PENDING or rec.pid != os.getpid():
        return None
    text, supervisor = hand_off(cfg)
    if not _say(cfg, text):
        return None
    if supervisor and os.environ.get(SYSTEMD_SERVICE_ENV):
        _outlive(supervisor)
    return text
