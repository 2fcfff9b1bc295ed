"""The regeneration's status record, ``status.json`` in its run dir: written by its supervisor,
read by ``hsx-runner regenerate status``; the mechanics are every supervised kind's
(``job.supervised``)."""

from __future__ import annotations

import os

from ..contract.atomic import read_object
from ..contract.errors import StatusError
from ..contract.regenerate import PHASES, RegenerateRecord
from ..contract.status import STATUS
from ..job import supervised
from ..output.jsonl import rank_file

KIND = supervised.Kind(
    "regeneration", RegenerateRecord, PHASES, "runner.regenerate.supervisor", "regenerate", "regenerating"
)


def load(root: str, rank: int | None = None) -> supervised.Record:
    """The writer's record (a Slurm rank's: status.rankR.json)."""
    return KIND.load(root, rank_file(STATUS, rank))


def of_rank(root: str, rank: int) -> RegenerateRecord | None:
    """A Slurm rank's record as it wrote it, without the lock rule (its lock is on another node:
    Slurm says whether it runs); None when it has none or it is unreadable."""
    d = read_object(os.path.join(root, rank_file(STATUS, rank)))
    try:
        return RegenerateRecord.from_dict(d) if d is not None else None
    except StatusError:
        return None


def ranks_done(root: str, world: int) -> bool:
    """Every rank's record says done: each wrote it once all its rows were committed."""
    return all((rec := of_rank(root, r)) is not None and rec.phase == "done" for r in range(world))
