"""The extraction's hand-off to training, in this process, on real files: what it writes into the
extraction's record, and what readers make of a hand-off whose runner died. Through a real
extraction's runner and the real trainer: test_specforge.py; its verify: test_demo_train.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runner.contract.errors import ConfigError
from runner.contract.status import HANDOFF_PENDING, Phase, StatusRecord, read_record, write_record
from runner.job import background, view
from runner.text import extraction
from runner.train import handoff, record
from tests.runner.helpers import held_box
from tests.runner.train.test_preflight import _cfg, _lane, _model, _out
from tests.runner.train.units import UNIFIED, _fake_python

# specforge.cli whose train, given a run.yaml, runs a second and fails
TRAINS_A_SECOND = """import argparse, sys, time
def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"] and "-c" in argv:
        time.sleep(1)
        raise SystemExit(5)
    p = argparse.ArgumentParser(prog="specforge")
    p.add_subparsers(dest="command").add_parser("train")
    p.parse_args(argv)
if __name__ == "__main__":
    main()
"""


def _pending(out, pid=None) -> str:
    path = str(out / "status.json")
    write_record(path, StatusRecord(job="t", phase=Phase.DONE, total=2, done=2, pid=pid or os.getpid(),
                                    handoff=HANDOFF_PENDING))  # fmt: skip
    return path


def test_a_verified_output_is_said_ready_for_training_in_the_extractions_record(tmp_path):
    _model(tmp_path)
    out = _out(tmp_path)
    path = _pending(out)
    text = handoff.run(_cfg(tmp_path, _lane(tmp_path)))
    assert text == "features verified for training: `/train start` trains the draft"
    rec = read_record(path)
    assert rec.handoff == text and rec.phase is Phase.DONE
    assert text in extraction.render_text(rec)
    assert handoff.run(_cfg(tmp_path, _lane(tmp_path))) is None  # said once: no longer pending


def test_after_extraction_asks_for_the_training_and_a_refusal_is_said(tmp_path, monkeypatch):
    _model(tmp_path)
    out = _out(tmp_path)
    path = _pending(out)
    held_box(tmp_path, monkeypatch, {"vllm.service": 1})
    py = _fake_python(tmp_path, "sf", "0.2.0", UNIFIED)  # a GPU trainer: the stranger's GPUs refuse it
    text = handoff.run(_cfg(tmp_path, py, after_extraction=True))
    assert text.startswith("training not started (after_extraction): training preflight: gpus: ")
    assert "vllm.service" in text and read_record(path).handoff == text
    assert not os.path.exists(tmp_path / "out-train")


def test_under_a_systemd_service_the_runner_stays_while_the_training_it_started_runs(tmp_path, monkeypatch):
    _model(tmp_path)
    out = _out(tmp_path)
    path = _pending(out)
    # a CPU-lane interpreter whose trainer takes a second and fails (no GPU asked for, none held)
    lane = os.path.dirname(os.path.dirname(_lane(tmp_path)))
    fake = _fake_python(tmp_path, "sf", "0.2.0", TRAINS_A_SECOND)
    os.replace(fake, os.path.join(lane, "bin", "python"))
    monkeypatch.setenv(handoff.SYSTEMD_SERVICE_ENV, "0123abcd")
    text = handoff.run(_cfg(tmp_path, os.path.join(lane, "bin", "python"), after_extraction=True))
    assert text.startswith("training started (after_extraction): training started (trainer pid "), text
    assert read_record(path).handoff == text
    rec = record.read(str(tmp_path / "out-train"))  # the runner returned only once it had ended
    assert rec["phase"] == "crashed" and "exited with code 5" in rec["reason"], rec


def test_unverified_features_are_verified_by_the_hand_off_itself_and_unsound_ones_refused(tmp_path):
    _model(tmp_path)
    out = _out(tmp_path, verify=False)  # two files that are no samples
    rows = "".join(json.dumps({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]}) + "\n" for _ in range(2))
    (tmp_path / "d.jsonl").write_text(rows)
    path = _pending(out)
    text = handoff.run(_cfg(tmp_path, _lane(tmp_path), after_extraction=True))
    assert text.startswith("training not started: the features are not verified: the last verify (")
    assert "found 0 / 2 sound (2 corrupt)" in text and read_record(path).handoff == text
    bg = background.read(str(out))
    assert bg["verb"] == "verify" and bg["state"] == "done" and bg["pid"] == os.getpid()
    assert bg["result"]["corrupt"] == [0, 1] and not os.path.exists(tmp_path / "out-train")


def test_another_runners_record_is_left_alone(tmp_path):
    _model(tmp_path)
    out = _out(tmp_path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        path = _pending(out, other.pid)
        assert handoff.run(_cfg(tmp_path, _lane(tmp_path))) is None
        assert read_record(path).handoff == HANDOFF_PENDING
        assert view.current(str(out)).handoff == HANDOFF_PENDING  # its runner lives: still under way
        assert "verifying the features first" in extraction.render_text(view.current(str(out)))
    finally:
        other.kill()
        other.wait()
    rec = view.current(str(out))  # its runner gone before it said: readers say so
    assert rec.handoff == (
        f"the hand-off to training did not finish (runner pid {other.pid} is gone): "
        "hsx-runner verify, then hsx-runner train start"
    )


def test_after_extraction_needs_an_interpreter(tmp_path):
    with pytest.raises(ConfigError, match=r"after_extraction needs \[train\] python"):
        _cfg(tmp_path, "", after_extraction=True)
