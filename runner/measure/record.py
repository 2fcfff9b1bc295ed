"""The measurement's status record, ``status.json`` in its run dir: written by its supervisor
(atomically, typed as the reader's MeasureRecord), read by ``hsx-runner measure status``; the
mechanics are every supervised kind's (``job.supervised``)."""

from __future__ import annotations

from ..contract.measure import PHASES, MeasureRecord
from ..job import supervised

KIND = supervised.Kind(
    "measurement", MeasureRecord, PHASES, "runner.measure.supervisor", "measure", "measuring"
)
