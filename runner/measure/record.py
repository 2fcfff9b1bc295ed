"""The measurement's status record, ``status.json`` in its run dir: written by its supervisor
(atomically, typed as the reader's MeasureRecord), read by ``hsx-runner measure status``; the
mechanics are every supervised kind's (``job.supervised``)."""

from __future__ import annotations

from ..contract.measure import PHASES, MeasureRecord
from ..job import supervised

KIND = supervised.Kind(
    "measurement", MeasureRecord, PHASES, "runner.measure.supervisor", "measure", "measuring"
)


def load(root: str) -> supervised.Record:
    """The writer's record."""
    return supervised.Record.load(KIND, root)


def read(root: str) -> MeasureRecord:
    """The record as a reader should see it (BrokenFileError naming a broken one)."""
    return supervised.read(KIND, root)
