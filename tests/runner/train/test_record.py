"""The training's status record on the writer's side: typed as the reader's TrainRecord is, so
a misspelt field or a value of the wrong kind fails where it is written, not in a reader later."""

from __future__ import annotations

import pytest

from runner.contract.errors import StatusError
from runner.train import record


def test_the_writer_refuses_an_unknown_field_a_wrong_kind_or_phase_and_keeps_what_it_had(tmp_path):
    rec = record.Record(str(tmp_path), {"step": 1})
    with pytest.raises(KeyError, match="stpe"):
        rec.update(stpe=3)
    with pytest.raises(StatusError, match="'step' is not an integer"):
        rec.update(loss=0.5, step="3")
    with pytest.raises(StatusError, match="unknown phase 'extracting'"):
        rec.update(phase="extracting")
    with pytest.raises(StatusError, match="'steps_per_epoch'"):
        rec.update(steps_per_epoch=1.5)
    assert rec.d == {"step": 1}  # nothing of a refused update was kept

    rec.update(phase="training", step=3, loss=None, features=str(tmp_path), config=None,
               output_dir=str(tmp_path), steps_per_epoch=2, nan_loss=False)  # fmt: skip
    rec.write()
    got = record.read(str(tmp_path))
    assert (got["step"], got["steps_per_epoch"], got["output_dir"]) == (3, 2, str(tmp_path))
