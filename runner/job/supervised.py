"""What every supervised kind of job shares (the measurement, the regeneration): a run dir whose
``.lock`` the detached supervisor holds while it works, its ``status.json`` typed as the reader's
record, the launch that waits for the claim, and the stop by SIGTERM. A kind is data here: its
record class, its phases, its module and its words."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..contract import fields, timing
from ..contract.atomic import no_follow, read_object, write_atomic
from ..contract.errors import BrokenFileError, StatusError
from ..contract.replies import OK, REFUSED, Reply
from ..contract.status import NOT_STARTED, STATUS, gone, now_iso
from ..output.lock import blocks, is_held_at, wait_ofd
from . import detach


@dataclass(frozen=True)
class Kind:
    word: str  # "measurement": what the texts call it
    record: type  # the reader's record (from_dict, phase, active)
    phases: tuple[str, ...]
    module: str  # the supervisor: python -m MODULE RUN_DIR CONFIG
    verb: str  # hsx-runner VERB start
    doing: str  # "measuring": its supervisor, named when it is gone

    @property
    def where(self) -> str:
        return f"the {self.word} record"

    @property
    def fix(self) -> str:
        return f"hsx wrote it for this {self.word}: move the run dir aside and start again (hsx-runner {self.verb} start)"

    def kinds(self) -> dict[str, str]:
        return {f.name: str(f.type) for f in dataclasses.fields(self.record)}

    def load(self, root: str, name: str = STATUS) -> Record:
        """The writer's record (a Slurm rank's: ``name``, status.rankR.json)."""
        return Record.load(self, root, name)

    def read(self, root: str) -> Any:
        """The record as a reader should see it (``read``)."""
        return read(self, root)


class Record:
    """The writer's side of a run's status.json (a Slurm rank's: ``name``, status.rankR.json)."""

    def __init__(self, kind: Kind, root: str, d: dict | None = None, name: str = STATUS):
        self.kind, self.root, self.d, self.name = kind, root, dict(d or {}), name

    @classmethod
    def load(cls, kind: Kind, root: str, name: str = STATUS) -> Record:
        return cls(kind, root, read_object(os.path.join(root, name)) or {}, name)

    def update(self, **kw) -> None:
        """Typed as the reader's record: an unknown field, a wrong kind or another kind's phase
        fails here, before anything of ``kw`` is kept."""
        fields.update(self.kind.where, self.kind.kinds(), self.kind.phases, self.d, kw)

    def write(self) -> None:
        self.d["heartbeat"] = now_iso()
        write_atomic(os.path.join(self.root, self.name), json.dumps(self.d) + "\n")


def read(kind: Kind, root: str) -> Any:
    """The record as a reader should see it (BrokenFileError naming a broken one). An active
    phase whose supervisor no longer holds the run's lock reads as crashed (every kind's rule,
    ``contract.status.gone``)."""
    path = os.path.join(root, "status.json")
    d = read_object(path)
    if d is None and os.path.lexists(path):
        raise BrokenFileError(path, "it is not a readable JSON object", kind.fix)
    if d is None:
        return kind.record(phase="stopped", reason=NOT_STARTED, run_dir=root)
    try:
        rec = kind.record.from_dict(d)
    except StatusError as e:
        raise BrokenFileError(path, str(e), kind.fix) from None
    if rec.active and not is_held_at(os.path.join(root, ".lock"))[0]:
        if not (rec.phase == "preflight" and launching(root)):  # a launch under way is not a crash
            why = gone(f"{kind.doing} supervisor", rec.pid, rec.phase, rec.heartbeat)
            rec = dataclasses.replace(rec, phase="crashed", reason=why)
    return rec


def refused(why: str) -> Reply:
    return Reply({"started": False, "reason": why}, why, REFUSED)


def not_resumable(kind: Kind, root: str, done: Callable[[Any], str]) -> Reply | None:
    """Why a resume of the run in ``root`` is refused: none started there, or it is done
    (``done(record)``: what the refusal adds, where its output is or what to do)."""
    rec = read(kind, root)
    if not rec.started_at:
        return refused(f"nothing to resume in {root}: start it first (hsx-runner {kind.verb} start)")
    if rec.phase == "done":
        return refused(f"the {kind.word} in {root} is done{done(rec)}")
    return None


def running(kind: Kind, root: str) -> Reply | None:
    held, pid = is_held_at(os.path.join(root, ".lock"))
    return refused(f"a {kind.word} runs in {root} (pid {pid})") if held else None


LAUNCH_LOCK = ".launch.lock"  # held while a launch writes the record and waits for its claim


@contextlib.contextmanager
def one_launch(root: str):
    """The launches of one run dir, every kind's, one at a time (two operators, a typed start and
    a Resume click, a pipeline's start, the training's export): an OFD lock on ``.launch.lock``
    (opened without following a link), waited for, so the second finds what the first launched;
    a reader sees a launch under way (``launching``) without taking it."""
    os.makedirs(root, exist_ok=True)
    fd = no_follow(os.path.join(root, LAUNCH_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        wait_ofd(fd, fcntl.F_WRLCK)
        yield
    finally:
        os.close(fd)


def launching(root: str) -> bool:
    """A start, resume or export of the run in ``root`` is under way (it holds the launch lock)."""
    return blocks(os.path.join(root, LAUNCH_LOCK), fcntl.F_WRLCK)


def launch(kind: Kind, root: str, config: str, how: str, **first) -> Reply:
    """The supervisor, detached, once the record says preflight; "started" only once it holds
    the run's lock (one that dies at once says why). One launch at a time: a second one asked
    meanwhile finds the first's supervisor running and is refused, never writing over its record."""
    with one_launch(root):
        if reply := running(kind, root):
            return reply
        return _launch(kind, root, config, how, **first)


def _launch(kind: Kind, root: str, config: str, how: str, **first) -> Reply:
    rec = Record.load(kind, root)
    rec.update(phase="preflight", run_dir=root, reason="", pid=None, **first)
    rec.write()
    argv = [sys.executable, "-m", kind.module, root, os.path.abspath(config)]
    p = detach.spawn(argv, os.path.join(root, "supervisor.log"))
    held = lambda: is_held_at(os.path.join(root, ".lock")) == (True, p.pid)  # noqa: E731
    claimed = detach.wait_claim(p, held, timing.current().claim_s)
    if claimed is False:
        if reply := running(kind, root):  # one started some other way holds the run: its record stays
            return reply
        why = f"the {kind.word} supervisor exited with code {p.returncode} at once; see {root}/supervisor.log"
        rec.update(phase="crashed", reason=why)
        rec.write()
        return refused(why)
    return Reply(
        {"started": True, "pid": p.pid, "run_dir": root}, f"{kind.word} {how} (pid {p.pid}); {root}", OK
    )


def stop(root: str, wait_s: float, pending: str) -> Reply:
    lock = os.path.join(root, ".lock")
    held, pid = is_held_at(lock)
    if not held or not pid:
        return Reply({"stopped": False, "reason": "not running"}, "not running", REFUSED)
    ok = detach.stop(pid, lambda: is_held_at(lock)[0], wait_s)
    return Reply(
        {"stopped": ok, "pid": pid}, "stopped" if ok else f"stop asked; pid {pid} still {pending}", OK
    )
