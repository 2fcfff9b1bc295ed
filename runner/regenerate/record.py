"""The regeneration's status record, ``status.json`` in its run dir: written by its supervisor,
read by ``hsx-runner regenerate status``; the mechanics are every supervised kind's
(``job.supervised``)."""

from __future__ import annotations

from ..contract.regenerate import PHASES, RegenerateRecord
from ..job import supervised

KIND = supervised.Kind(
    "regeneration", RegenerateRecord, PHASES, "runner.regenerate.supervisor", "regenerate", "regenerating"
)


def load(root: str) -> supervised.Record:
    """The writer's record."""
    return supervised.Record.load(KIND, root)


def read(root: str) -> RegenerateRecord:
    """The record as a reader should see it (BrokenFileError naming a broken one)."""
    return supervised.read(KIND, root)
