"""The run's curve, ``history.jsonl`` in the run dir: what ``hsx-runner train history`` prints.

The supervisor appends one JSON line per step line and eval line of its launch (the first of
each step: every rank prints the same, all-reduced, line) and one per launch and per end. The
reader skips what it cannot read (a line torn by a kill -9, garbage), and a launch that never
wrote its end (its supervisor killed) reads as crashed at its last logged step, as the record
does. A resume from step K trains the steps after K again: their points and evals from the
launches before it are dropped, so the curve has each step once, as the draft it saved learned
it. A fresh start begins a new file: the run before it kept no checkpoint.
"""

from __future__ import annotations

import json
import os

from ..contract.atomic import read_jsonl, torn, write_atomic
from ..contract.train import MAX_STEP
from . import progress

NAME = "history.jsonl"
CAP = 20000  # the points printed: the last ones
ENDS = ("crashed", "stopped", "done")


def _num(v):
    return progress.number(v)


def _int(v):
    """A step or a launch: an int within 0..MAX_STEP, else None (the line is skipped)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_STEP else None


class Writer:
    """Appends to the run's history; a torn last line (a kill -9 mid-write) is ended first, so
    it stays one bad line instead of spoiling the next."""

    def __init__(self, root: str, launch: int):
        self.launch = launch
        self.fd = os.open(os.path.join(root, NAME), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if torn(os.path.join(root, NAME)):
            os.write(self.fd, b"\n")

    def add(self, kind: str, step: int | None, **kw) -> None:
        line = json.dumps({"kind": kind, "step": step, "launch": self.launch, **kw}) + "\n"
        os.write(self.fd, line.encode())  # one write on O_APPEND: whole or torn at its end, never mixed

    def close(self) -> None:
        os.close(self.fd)


def reset(root: str) -> None:
    write_atomic(os.path.join(root, NAME), "", 0o644)


def _lines(root: str):
    # the supervisor writes short lines: a long one is not one of them
    for d in read_jsonl(os.path.join(root, NAME), max_line=progress.MAX_LINE):
        if isinstance(d.get("kind"), str) and _int(d.get("launch")) is not None:
            yield d


def read(root: str, rec: dict) -> dict:
    """``{"points", "evals", "marks"}`` (the contract's shape); ``rec`` is the record as read,
    which says whether the last launch is still going."""
    points, evals, marks = [], [], []
    last: int | None = None
    launches: dict[int, bool] = {}  # launch -> it wrote its end
    last_of: dict[int, int | None] = {}
    for d in _lines(root):
        launch, step = d["launch"], _int(d.get("step"))
        kind = d["kind"]
        if kind == "step" and step is not None:
            points.append(
                {"step": step, "loss": _num(d.get("loss")), "acc": _num(d.get("acc")), "launch": launch}
            )
            last = step
        elif kind == "eval" and step is not None:
            evals.append({"step": step, "val_acc": _num(d.get("val_acc")), "acc_len": _num(d.get("acc_len")),
                          "launch": launch})  # fmt: skip
        elif kind == "launch":
            if d.get("how") == "resume":
                marks.append({"step": step, "kind": "resumed", "launch": launch})
                if step is not None:  # the steps past its checkpoint are trained again: the new ones stand
                    points = [p for p in points if p["step"] <= step]
                    evals = [e for e in evals if e["step"] <= step]
        elif kind in ENDS:
            marks.append({"step": step, "kind": kind, "launch": launch})
        else:
            continue
        launches[launch] = launches.get(launch, False) or kind in ENDS  # any line of it says it ran
        last_of[launch] = last
    live = rec.get("launches") if rec.get("phase") in ("preflight", "loading", "training") else None
    for launch, ended in launches.items():
        if not ended and launch != live:
            at = next((i for i, m in enumerate(marks) if m["launch"] > launch), len(marks))
            marks.insert(at, {"step": last_of.get(launch), "kind": "crashed", "launch": launch})
    return {"points": points[-CAP:], "evals": evals, "marks": marks}
