"""The extraction's hand-off to training on the Slurm engine (a box's is runner.train.handoff).

No one runner ends a cluster's job: each rank's does, each its own share. So a rank's runner
that ends done looks at every rank; once all are complete, the first to claim ``OUT/handoff.json``
(created exclusively) waits for its peers' runners to let go of the output and hands off as a
box's runner does (verify, then with ``after_extraction`` the training, submitted as a Slurm
job: a process started here would end with this rank's job). The merged status says the claim's
outcome as the record's ``handoff``; a new submission clears it.
"""

from __future__ import annotations

import json
import os
import time

from ..contract.atomic import read_object, write_atomic
from ..contract.status import HANDOFF_PENDING, now_iso
from ..output.lock import held_any
from ..output.store import Store
from ..train import handoff
from . import slurm_io
from .slurm_merge import RUNNING, Task, complete

FILE = "handoff.json"
PEERS_S = 60.0  # how long the claimer waits for the other ranks' runners to exit


def _all_complete(out: str, st: dict) -> bool:
    markers = Store(out).complete_shards()
    return all(
        complete(lo, hi, markers, slurm_io.read_rank(out, r)) for r, (lo, hi) in enumerate(st["ranges"])
    )


def _claim(out: str, rank: int) -> bool:
    try:
        fd = os.open(os.path.join(out, FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump({"rank": rank, "pid": os.getpid(), "claimed_at": now_iso(), "text": None}, f)
    return True


def run(cfg, rank: int, start) -> str | None:
    """This rank's part of the hand-off: None unless it was the one to do it, else what came of it.
    ``start``: the Slurm engine's training start (runner.engines.slurm_train)."""
    out = cfg.job.out
    st = slurm_io.load_state(out)
    if not st or not _all_complete(out, st) or not _claim(out, rank):
        return None
    deadline = time.monotonic() + PEERS_S
    while held_any(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    text, _ = handoff.hand_off(cfg, start)
    d = read_object(os.path.join(out, FILE)) or {"rank": rank}
    write_atomic(
        os.path.join(out, FILE), json.dumps({**d, "text": text, "ended_at": now_iso()}) + "\n", 0o644
    )
    return text


def said(out: str, tasks: dict[int, Task]) -> str:
    """The done job's ``handoff``: its outcome, pending while a rank may still claim or is at it."""
    d = read_object(os.path.join(out, FILE))
    running = {r for r, t in tasks.items() if t.state in RUNNING}
    if d is None:
        if running:
            return HANDOFF_PENDING
        return "no rank handed the features to training: `hsx-runner verify`, then `/train start`"
    if d.get("text"):
        return str(d["text"])
    if d.get("rank") in running:
        return HANDOFF_PENDING
    return (
        f"the hand-off by rank {d.get('rank')} did not finish (its task ended): "
        "`hsx-runner verify`, then `/train start`"
    )


def clear(out: str) -> None:
    """A new submission's job hands off anew."""
    try:
        os.unlink(os.path.join(out, FILE))
    except FileNotFoundError:
        pass
