"""The pipeline's status record, ``status.json`` in its run dir; the mechanics are every supervised
kind's (``job.supervised``)."""

from __future__ import annotations

from ..contract.pipeline import PHASES, PipelineRecord
from ..job import supervised

KIND = supervised.Kind(
    "pipeline", PipelineRecord, PHASES, "runner.pipeline.supervisor", "pipeline", "pipeline's"
)


def load(root: str) -> supervised.Record:
    """The writer's record."""
    return supervised.Record.load(KIND, root)


def read(root: str) -> PipelineRecord:
    return supervised.read(KIND, root)
