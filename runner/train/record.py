"""The training run's status record, ``status.json`` in the run dir.

Written by the supervisor (atomically), read by ``hsx-runner train status``. Phases in the
extraction's words: ``preflight`` (the run dir written, the supervisor starting), ``loading``
(the trainer up, no step yet: SpecForge is silent while it loads the target head and counts
the vocab), ``training``, then ``done``, ``stopped`` or ``crashed``. A reader that finds an
active phase whose supervisor no longer holds the lock says crashed, as the extraction does;
a preflight whose launch is still under way (its launch lock held) is not.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os

from ..contract import fields
from ..contract.atomic import write_atomic
from ..contract.errors import BrokenFileError, StatusError
from ..contract.fields import check
from ..contract.status import NOT_STARTED, gone
from ..contract.train import ACC_WINDOW, ACTIVE, PHASES, WRITTEN, TrainRecord, checked
from ..job.supervised import launching
from ..output.lock import is_held_at
from .progress import number

BOX = {"output_dir": "str | None", "steps_per_epoch": "int | None"}  # read here only, never sent
FIELDS = WRITTEN + tuple(BOX)  # status.json's known keys: the contract's record, and the box's own
# the launch's inputs, for its supervisor: the features it trains on, the config it exports with
KEPT = {"features": "str", "config": "str | None"}
# what the writer may set, each of its kind: the reader's record (TrainRecord), the box's own keys
KINDS = {**{f.name: str(f.type) for f in dataclasses.fields(TrainRecord) if f.name in WRITTEN}, **BOX, **KEPT}
FIX = ("hsx wrote it for this run, whose state it holds: restore it, or move the run dir aside and start "
       "a fresh run (hsx-runner train start)")  # fmt: skip


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Record:
    def __init__(self, root: str, d: dict):
        self.root = root
        self.d = d

    @classmethod
    def load(cls, root: str) -> Record:
        return cls(root, _raw(root) or {})

    def update(self, **kw) -> None:
        """Typed as the reader's record: a field it does not have, a value of the wrong kind or
        another kind's phase fails here, before anything of ``kw`` is kept."""
        fields.update("the training record", KINDS, PHASES, self.d, kw)

    def step_line(self, step: int, m: dict) -> None:
        loss = m.get("loss")
        per = self.d.get("steps_per_epoch") or 0
        epochs = self.d.get("epochs") or 1
        self._acc(number(m.get("acc")))
        self.d.update(
            phase="training", step=step, loss=number(loss), acc=number(m.get("acc")),
            acceptance_rate=number(m.get("acceptance_rate")), last_step_at=now(),
            epoch=min(epochs, (step - 1) // per + 1) if per and step > 0 else None,
            nan_loss=isinstance(loss, float) and not math.isfinite(loss),
        )  # fmt: skip

    def _acc(self, acc: float | None) -> None:
        """One batch's acc is noise (the demo's batch is one sample): a running mean, the plain
        mean until ACC_WINDOW batches and then one that forgets at 1/ACC_WINDOW a batch, kept in
        the record so a resume goes on from it; and the first ACC_WINDOW's mean, to see it rise."""
        if acc is None:
            return
        n = (self.d.get("acc_logged") or 0) + 1
        mean = self.d.get("acc_mean")
        mean = acc if mean is None else mean + (acc - mean) / min(n, ACC_WINDOW)
        self.d.update(acc_logged=n, acc_mean=mean)
        if n == ACC_WINDOW:
            self.d.update(acc_start=mean)

    def eval_line(self, step: int, m: dict) -> None:
        """SpecForge's eval: the last one, and the best acceptance length (higher wins, as
        SpecForge's own best checkpoint)."""
        acc_len = number(m.get("eval/simulated_acc_len"))
        self.d.update(val_acc=number(m.get("eval/avg_acc")), acc_len=acc_len, eval_step=step)
        best = self.d.get("best_acc_len")
        if acc_len is not None and (best is None or acc_len > best):
            self.d.update(best_acc_len=acc_len, best_step=step)

    def write(self) -> None:
        write_atomic(os.path.join(self.root, "status.json"), json.dumps(self.d, indent=1) + "\n")


def _raw(root: str) -> dict | None:
    """The record as written; None before there is one; BrokenFileError (its path, what is wrong,
    what to do) when it is there but not a JSON object."""
    path = os.path.join(root, "status.json")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise BrokenFileError(path, f"it cannot be read ({e})", FIX) from None
    try:
        d = json.loads(text)
    except (ValueError, RecursionError) as e:  # ValueError: not JSON, not UTF-8, an int of 5,000 digits
        raise BrokenFileError(path, f"it is not valid JSON ({str(e)[:200]})", FIX) from None
    if not isinstance(d, dict):
        raise BrokenFileError(path, f"it holds a JSON {type(d).__name__}, not an object", FIX)
    return d


def read(root: str) -> dict:
    """The record as a reader should see it: every field present and of its kind (a broken one
    is BrokenFileError), an active phase without its supervisor said to be crashed."""
    return judged(root)[0]


TRIES = 3  # reads of a record that moves on while it is read, before the last one is judged


def judged(root: str) -> tuple[dict, str | None]:
    """``read``'s record, and the active phase it had when it is said crashed (None otherwise):
    the Slurm engine asks its job about a preflight no supervisor holds yet.

    The locks and the record are read at different moments: a supervisor takes the lock before
    it writes past preflight and writes its last phase before it lets go, and a launch writes
    preflight under the launch lock. So a record is judged only when it is the same after the
    locks were looked at; one that moved on meanwhile is read again."""
    for _ in range(TRIES):
        d = _raw(root)
        out = _checked(root, d)
        if out["phase"] not in ACTIVE or is_held_at(os.path.join(root, ".lock"))[0]:
            return out, None
        if out["phase"] == "preflight" and launching(root):
            return out, None  # its launch is still under way (a supervisor starting, a job submitted)
        if _raw(root) == d:
            break
    phase = out["phase"]
    out["reason"] = gone("supervisor", out["supervisor_pid"], phase, out["heartbeat"])
    out["phase"] = "crashed"
    return out, phase


def _checked(root: str, d: dict | None) -> dict:
    if d is None:
        d = {"phase": "stopped", "reason": NOT_STARTED, "run_dir": root}
    out = {k: d.get(k) for k in FIELDS}
    path = os.path.join(root, "status.json")
    try:  # a start's first record has no phase until its launch is written
        checked({**out, "phase": out["phase"] or "preflight"}, "the training record")
        for k, kinds in BOX.items():
            check("the training record", k, out[k], kinds)
    except StatusError as e:
        raise BrokenFileError(path, str(e), FIX) from None
    return out
