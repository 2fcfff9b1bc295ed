"""The training's history as ``hsx-runner train history --json`` prints it, checked: every logged
step's loss and acc, each eval, and the launch events (crashed, stopped, resumed, done).

The box keeps it (``history.jsonl`` in the run dir); the ops side reads it for `/train chart`.
Unknown keys are ignored; a known key holding the wrong kind is refused by name.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .errors import StatusError
from .fields import plain, short

WHERE = "training history"
MARKS = ("crashed", "stopped", "resumed", "done")


@dataclass(frozen=True)
class Point:
    step: int
    loss: float | None = None
    acc: float | None = None
    launch: int | None = None


@dataclass(frozen=True)
class Eval:
    step: int
    val_acc: float | None = None
    acc_len: float | None = None
    launch: int | None = None


@dataclass(frozen=True)
class Mark:
    kind: str
    step: int | None = None  # the last logged step; None: before any
    launch: int | None = None


LISTS = {"points": Point, "evals": Eval, "marks": Mark}


def _entry(cls: type, i: int, d: Any, where: str) -> dict:
    if not isinstance(d, dict):
        raise StatusError(f"{where} {i} is not an object")
    d = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in d.items()}
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING and d.get(f.name) is None:
            raise StatusError(f"{where} {i} has no {f.name!r}")
    kw = plain(cls, d, f"{where} {i}")
    if cls is Mark and kw["kind"] not in MARKS:
        raise StatusError(f"{where} {i} has unknown kind {short(kw['kind'])}")
    return dataclasses.asdict(cls(**kw))


def parse_history(d: Any) -> dict[str, list[dict]]:
    """``{"points", "evals", "marks"}``, each a list of entries with every known key (None where
    the box did not say). A reply without ``points`` is not a history; the others may be absent."""
    if not isinstance(d, dict):
        raise StatusError(f"{WHERE} is not a JSON object")
    if "points" not in d:
        raise StatusError(f"{WHERE} has no 'points' list")
    out = {}
    for key, cls in LISTS.items():
        items = d.get(key, [])
        if not isinstance(items, list):
            raise StatusError(f"{WHERE} field {key!r} is not a list (got {type(items).__name__})")
        out[key] = [_entry(cls, i, x, f"{WHERE} {key[:-1]}") for i, x in enumerate(items)]
    return out
