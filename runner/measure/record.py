"""The measurement's status record, ``status.json`` in its run dir: written by its supervisor
(atomically, typed as the reader's MeasureRecord), read by ``hsx-runner measure status``. An
active phase whose supervisor no longer holds the run's lock reads as crashed (every kind's rule,
``contract.status.gone``)."""

from __future__ import annotations

import dataclasses
import json
import os

from ..contract import fields
from ..contract.atomic import read_object, write_atomic
from ..contract.errors import BrokenFileError, StatusError
from ..contract.measure import PHASES, MeasureRecord
from ..contract.status import NOT_STARTED, gone, now_iso
from ..output.lock import is_held_at

KINDS = {f.name: str(f.type) for f in dataclasses.fields(MeasureRecord)}
FIX = "hsx wrote it for this measurement: move the run dir aside and start again (hsx-runner measure start)"


class Record:
    def __init__(self, root: str, d: dict | None = None):
        self.root, self.d = root, dict(d or {})

    @classmethod
    def load(cls, root: str) -> Record:
        return cls(root, read_object(os.path.join(root, "status.json")) or {})

    def update(self, **kw) -> None:
        """Typed as the reader's record: an unknown field, a wrong kind or another kind's phase
        fails here, before anything of ``kw`` is kept."""
        fields.update("the measurement record", KINDS, PHASES, self.d, kw)

    def write(self) -> None:
        self.d["heartbeat"] = now_iso()
        write_atomic(os.path.join(self.root, "status.json"), json.dumps(self.d) + "\n")


def read(root: str) -> MeasureRecord:
    """The record as a reader should see it (BrokenFileError naming a broken one)."""
    path = os.path.join(root, "status.json")
    d = read_object(path)
    if d is None and os.path.lexists(path):
        raise BrokenFileError(path, "it is not a readable JSON object", FIX)
    if d is None:
        return MeasureRecord(phase="stopped", reason=NOT_STARTED, run_dir=root)
    try:
        rec = MeasureRecord.from_dict(d)
    except StatusError as e:
        raise BrokenFileError(path, str(e), FIX) from None
    if rec.active and not is_held_at(os.path.join(root, ".lock"))[0]:
        why = gone("measuring supervisor", rec.pid, rec.phase, rec.heartbeat)
        rec = dataclasses.replace(rec, phase="crashed", reason=why)
    return rec
