"""Read-only views of a job for ``hsx-runner status|logs``: never touch the running process.

The record on disk says what the runner last wrote; the lock says whether it still lives.
An active phase with no live runner is reported as ``crashed``."""

from __future__ import annotations

import os

from ..contract.status import (
    HANDOFF_PENDING,
    NOT_STARTED,
    STATUS,
    Phase,
    StatusRecord,
    age_s,
    gone,
    read_record,
)
from ..output import lock
from ..output.store import Store
from ..procs import alive
from . import background


def current(out: str) -> StatusRecord:
    path = os.path.join(out, STATUS)
    held, pid = lock.is_held(out)
    if not os.path.exists(path):
        rec = StatusRecord(phase=Phase.STOPPED, reason=NOT_STARTED, alive=held, pid=pid)
        rec.disk.path = out
        try:
            rec.total = int((Store(out).description() or {}).get("total", 0))
        except (TypeError, ValueError):
            pass
        if held:
            rec.phase, rec.reason = Phase.PREFLIGHT, None
        rec.background = background.read(out)
        return rec
    rec = read_record(path)  # StatusError on a corrupt file: the caller reports it
    if held and pid and rec.pid != pid:
        # a new runner took the lock but has not written its first record yet
        rec.phase, rec.reason, rec.pid, rec.phase_since = Phase.PREFLIGHT, None, pid, None
        rec.done_this_run = rec.errors_this_run = 0
    rec.alive = held and (pid is None or pid == rec.pid)
    rec.heartbeat_age_s = age_s(rec.heartbeat_at)
    if rec.phase.is_active() and not held:
        rec.reason = gone("runner", rec.pid, rec.phase.value, rec.heartbeat_at)
        rec.phase = Phase.CRASHED
        rec.phase_since = rec.heartbeat_at
    if not held:
        rec.rate = rec.tokens_per_s = rec.eta_s = None
    if rec.handoff == HANDOFF_PENDING and not alive(rec.pid):
        rec.handoff = (
            f"the hand-off to training did not finish (runner pid {rec.pid} is gone): "
            "hsx-runner verify, then hsx-runner train start"
        )
    rec.background = background.read(out)
    return rec


def tail(path: str, n: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max(65536, n * 400)))
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    return text.replace("\r", "\n").splitlines()[-n:]
