"""The training's status record on the writer's side: typed as the reader's TrainRecord is, so
a misspelt field or a value of the wrong kind fails where it is written, not in a reader later."""

from __future__ import annotations

import os

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


def test_a_record_that_ends_while_it_is_read_is_read_as_it_ended(tmp_path, monkeypatch):
    """The supervisor writes done and lets go of the lock between a reader's read of the record
    and its look at the lock: done, not crashed."""
    from runner.output.lock import JobLock

    root = str(tmp_path)
    lock = JobLock(os.path.join(root, ".lock"))
    lock.acquire()
    record.Record(root, {"phase": "training", "step": 1, "total_steps": 1}).write()
    looked = record.is_held_at

    def end_then_look(path):
        if lock.fd is not None:
            record.Record(root, {"phase": "done", "step": 1, "total_steps": 1}).write()
            lock.release()
        return looked(path)

    monkeypatch.setattr(record, "is_held_at", end_then_look)
    got = record.read(root)
    assert got["phase"] == "done", got


def test_the_drafts_acc_is_said_as_a_running_mean_beside_where_it_started(tmp_path):
    """One logged batch's acc is noise (the demo's batch is one sample): the record keeps the mean
    of the first ACC_WINDOW and a running mean that forgets at 1/ACC_WINDOW a batch after them,
    kept across a resume (it lives in status.json), and the text says both, short (issue 49:
    what each figure is, once, under them: text.training.MEANS)."""
    from runner.contract.train import ACC_WINDOW, TrainRecord
    from runner.text.training import metrics_line

    rec = record.Record(str(tmp_path), {})
    rec.step_line(1, {"loss": 2.0, "acc": 0.5})
    said = metrics_line(TrainRecord.from_dict({**rec.d, "phase": "training"}))
    assert said == "loss 2 · acc 50.0%"  # the mean of the one logged batch so far
    accs = [0.0, 0.1] * (ACC_WINDOW // 2 - 1) + [0.0]  # with the 0.5: ACC_WINDOW in all
    for i, a in enumerate(accs, start=2):
        rec.step_line(i, {"loss": 2.0, "acc": a})
    start = (0.5 + sum(accs)) / ACC_WINDOW
    assert rec.d["acc_logged"] == ACC_WINDOW and rec.d["acc_start"] == pytest.approx(start)
    assert rec.d["acc_mean"] == pytest.approx(start)
    rec.write()
    rec = record.Record.load(str(tmp_path))  # a resumed supervisor goes on from the record
    for i in range(50):
        rec.step_line(ACC_WINDOW + 1 + i, {"loss": 1.0, "acc": 0.9})
    assert 0.85 < rec.d["acc_mean"] < 0.9 and rec.d["acc_start"] == pytest.approx(start)
    assert rec.d["acc"] == 0.9 and rec.d["acc_logged"] == ACC_WINDOW + 50
    said = metrics_line(TrainRecord.from_dict({**rec.d, "phase": "training"}))
    assert said == f"loss 1 · acc {100 * rec.d['acc_mean']:.1f}% (from {100 * start:.1f}%)", said
    rec.step_line(ACC_WINDOW + 51, {"loss": 1.0})  # a line without acc leaves the means
    assert rec.d["acc_logged"] == ACC_WINDOW + 50
