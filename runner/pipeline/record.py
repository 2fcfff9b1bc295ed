"""The pipeline's status record, ``status.json`` in its run dir; the mechanics are every supervised
kind's (``job.supervised``)."""

from __future__ import annotations

from ..contract.pipeline import PHASES, PipelineRecord
from ..job import supervised

KIND = supervised.Kind(
    "pipeline", PipelineRecord, PHASES, "runner.pipeline.supervisor", "pipeline", "pipeline's"
)
