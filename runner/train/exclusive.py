"""The one rule between a training run and the verbs that change its features.

A training run's supervisor holds an exclusive OFD lock on ``OUT/.lock.use`` (the kernel drops
it when the supervisor dies, even by kill -9) and writes its pid and run dir into it. The
extraction's runner, compact, adopt and ``verify --repair`` hold it shared, so they run beside
each other as before but never beside a training run; each also leaves ``OUT/.use/PID`` naming
its verb, so a refused training can say who holds the output. Readers test with F_OFD_GETLK,
which never takes the lock, so a check never makes the other side's start fail.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

from ..job import background
from ..output.lock import blocks, held_any, try_ofd
from ..procs import alive

NAME = ".lock.use"
USERS = ".use"
REFUSED_RC = 3  # the supervisor's exit when the output is taken


class Refused(Exception):
    """The output is in use by the other side; the message names the holder."""


def _open(out: str) -> int:
    os.makedirs(out, exist_ok=True)
    return os.open(os.path.join(out, NAME), os.O_RDWR | os.O_CREAT, 0o644)


def trainer_of(out: str) -> str | None:
    """Who trains on ``out`` now (None: no training run holds it)."""
    path = os.path.join(out, NAME)
    if not blocks(path, fcntl.F_RDLCK):
        return None
    try:
        with open(path) as f:
            d = json.loads(f.read() or "{}")
    except (OSError, ValueError):
        d = {}
    return f"a training run (supervisor pid {d.get('pid')}, run dir {d.get('run_dir')}) uses {out}"


def users_of(out: str) -> str | None:
    """Who else uses ``out`` now: the extraction, or a compact, adopt or verify --repair."""
    held = held_any(out)
    if held:
        return f"the extraction's runner (pid {held[1]}) holds {out}"
    bg = background.read(out) or {}
    if bg.get("state") == "running":
        return f"a background {bg.get('verb')} (pid {bg.get('pid')}) runs on {out}"
    try:
        names = os.listdir(os.path.join(out, USERS))
    except FileNotFoundError:
        names = []
    for n in sorted(names):
        if n.isdigit() and alive(int(n)):
            with contextlib.suppress(OSError), open(os.path.join(out, USERS, n)) as f:
                return f"{f.read().strip() or 'an hsx verb'} (pid {n}) runs on {out}"
    if blocks(os.path.join(out, NAME), fcntl.F_WRLCK):
        return f"an hsx verb uses {out}"
    return None


@contextlib.contextmanager
def using(out: str, verb: str):
    """Held by a verb that changes the features; Refused while a training run uses them."""
    fd = _open(out)
    if not try_ofd(fd, fcntl.F_RDLCK):
        os.close(fd)
        who = trainer_of(out) or f"a training run uses {out}"
        raise Refused(f"{who}; stop it first (hsx-runner train stop)")
    mark = os.path.join(out, USERS, str(os.getpid()))
    os.makedirs(os.path.dirname(mark), exist_ok=True)
    with open(mark, "w") as f:
        f.write(verb)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(mark)
        os.close(fd)


def train(out: str, pid: int, run_dir: str) -> int:
    """The supervisor's hold for its life (the fd; the kernel releases it); Refused when in use."""
    fd = _open(out)
    if not try_ofd(fd, fcntl.F_WRLCK):
        os.close(fd)
        raise Refused(f"{users_of(out) or 'another hsx verb uses ' + out}: train when it is done")
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": pid, "run_dir": run_dir}).encode(), 0)
    os.fsync(fd)
    return fd


def why_not_train(out: str, extraction=None) -> str | None:
    """What refuses a training start or resume on ``out`` now (None: nothing). ``extraction()``:
    the extraction's phase where its record is not the box's one file (the Slurm engine's ranks)."""
    from ..contract.status import Phase
    from ..job.view import current

    if who := users_of(out):
        return f"{who}: train when it is done"
    try:
        phase = extraction() if extraction else current(out).phase
    except Exception as e:  # noqa: BLE001 - a corrupt record refuses too, and says so
        return f"the extraction's status in {out} cannot be read ({e})"
    if phase != Phase.DONE:
        return (
            f"the extraction in {out} is {phase.value}, not done: train once it is done (hsx-runner status)"
        )
    return None


def extracting(out: str, extraction=None) -> bool:
    """The extraction holds ``out`` or its record says it is under way (a start may be arranged
    for its end)."""
    from ..job.view import current

    if held_any(out):
        return True
    try:
        return (extraction() if extraction else current(out).phase).is_active()
    except Exception:  # noqa: BLE001 - an unreadable record arranges nothing
        return False
