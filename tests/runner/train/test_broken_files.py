"""A broken file hsx reads on the box (the training's status.json, run.yaml, history.jsonl, the
extraction's status.json) answers a refusal that names it and says what to do, never a
traceback; the runner exits BROKEN, and the ops side tells that apart from an unreachable box."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bot.render.summary import render_error, train_blocks
from remote.client import GpuBox
from remote.errors import BrokenFile
from remote.transport import LocalTransport
from runner.contract.errors import StatusError
from runner.contract.replies import BROKEN, OK
from runner.contract.status import Phase, StatusRecord, write_record
from runner.contract.train import TrainRecord
from runner.contract.train_history import parse_history
from runner.text.training import render_train
from runner.train import record
from tests.conftest import RUNNER, write_config


def _config(tmp_path) -> str:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    path = tmp_path / "hsx.toml"
    job = {"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/d.jsonl", "out": out}
    return write_config(path, job=job, train={"python": sys.executable})


def _runner(conf: str, *verb: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNNER, *verb, "--json", "--config", conf], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def _refused_by_name(p: subprocess.CompletedProcess, path) -> None:
    assert p.returncode == BROKEN, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and str(path) in p.stderr and "is broken" in p.stderr, p.stderr
    reply = json.loads(p.stdout)
    assert reply["ok"] is False and reply["broken"] == str(path) and str(path) in reply["message"]


@pytest.mark.parametrize(
    "text",
    ["{garbage", "[1, 2]", '{"phase": "training", "loss": "low"}', '{"phase": "training", "step": -4}',
     '{"phase": "done", "output_dir": 5}', '{"phase": 7}', "\x00\xff"],
)  # fmt: skip
def test_a_broken_training_record_answers_broken_with_its_path(tmp_path, text):
    conf = _config(tmp_path)
    write_record(str(tmp_path / "out" / "status.json"), StatusRecord(job="t", phase=Phase.DONE))
    root = tmp_path / "out-train"
    root.mkdir()
    (root / ".hsx-run").touch()  # hsx's own run dir, its record broken since
    (root / "status.json").write_text(text)
    for action in ("status", "history", "resume", "export"):
        _refused_by_name(_runner(conf, "train", action), root / "status.json")


def _resumable(tmp_path, run_yaml: str):
    conf = _config(tmp_path)
    write_record(str(tmp_path / "out" / "status.json"), StatusRecord(job="t", phase=Phase.DONE))
    root = tmp_path / "out-train"
    ckpt = root / "output" / "hsx-eagle3-step2"
    ckpt.mkdir(parents=True)
    for name in ("training_state.pt", "training_state_rank0.pt"):
        (ckpt / name).write_bytes(b"x")
    (root / "run.yaml").write_text(run_yaml)
    (root / ".hsx-run").touch()
    record.Record(str(root), {"phase": "crashed", "run_id": "hsx-eagle3", "output_dir": str(root / "output"),
                              "world": 1, "launches": 1}).write()  # fmt: skip
    return conf, root


@pytest.mark.parametrize("text", ["{garbage", "[1]", '{"model": 5}', '{"model": "x"}', "7"])
def test_a_broken_run_yaml_at_resume_answers_broken_with_its_path(tmp_path, text):
    conf, root = _resumable(tmp_path, text)
    p = _runner(conf, "train", "resume")
    _refused_by_name(p, root / "run.yaml")
    assert "move" in p.stderr or "restore" in p.stderr  # what to do
    assert not (root / "supervisor.log").exists()  # nothing launched


ODD = [
    '{"kind": "step", "step": 1, "launch": 1, "loss": 2.0, "acc": 0.1}',
    '{"kind": "step", "step": 2, "launch": 1, "loss": ' + "9" * 400 + ', "acc": 0.2}',
    '{"kind": "step", "step": 3, "launch": 1, "loss": 1e999, "acc": -1e999}',
    '{"kind": "step", "step": 4, "launch": 1, "loss": NaN, "acc": [1]}',
    '{"kind": "step", "step": ' + "9" * 400 + ', "launch": 1, "loss": 1.0}',
    '{"kind": "step", "step": ' + "9" * 5000 + ', "launch": 1, "loss": 1.0}',
    '{"kind": "step", "step": -7, "launch": 1, "loss": 1.0}',
    '{"kind": "step", "step": 5, "launch": ' + "9" * 400 + ', "loss": 1.0}',
    '{"kind": "step", "step": true, "launch": 1}',
    '{"kind": "step", "step": 5.5, "launch": 1}',
    '{"kind": ["step"], "step": 5, "launch": 1}',
    '{"kind": "eval", "step": 4, "launch": 1, "val_acc": ' + "9" * 400 + ', "acc_len": "long"}',
    '{"kind": "launch", "step": null, "launch": 2, "how": {"a": 1}}',
    '{"kind": "crashed", "step": "x", "launch": 2}',
    "[" * 100000 + "]" * 100000,
    "[1, 2]",
    "null",
    '{"kind": "step", "step": 6, "launch": 1, "loss": 0.5, "acc": 0.6}',
    '{"kind": "step", "step": 7',
]


def test_history_lines_of_every_odd_shape_are_skipped_and_the_good_ones_kept(tmp_path):
    conf = _config(tmp_path)
    root = tmp_path / "out-train"
    root.mkdir()
    (root / "history.jsonl").write_bytes("\n".join(ODD).encode() + b"\n\xff\xfe\n")
    record.Record(str(root), {"phase": "crashed", "run_id": "hsx-eagle3", "launches": 2}).write()
    p = _runner(conf, "train", "history")
    assert p.returncode == OK and "Traceback" not in p.stderr, p.stderr
    h = parse_history(json.loads(p.stdout))  # what /train chart draws
    assert [pt["step"] for pt in h["points"]] == [1, 2, 3, 4, 6]
    assert [pt["loss"] for pt in h["points"]] == [2.0, None, None, None, 0.5]
    assert h["evals"] == [{"step": 4, "val_acc": None, "acc_len": None, "launch": 1}]


def test_a_broken_extraction_record_is_broken_not_unreachable(tmp_path):
    conf = _config(tmp_path)
    path = tmp_path / "out" / "status.json"
    for text in ("{garbage", "[1]", '{"phase": "extracting", "done": "many"}'):
        path.write_text(text)
        p = _runner(conf, "status")
        _refused_by_name(p, path)
        box = GpuBox(LocalTransport(), RUNNER, conf)
        with pytest.raises(BrokenFile) as got:
            box.status()
        assert got.value.file == str(path) and str(path) in got.value.message
        said = render_error(got.value)
        assert said.startswith(f"The GPU box answered, but its {path} is broken:"), said
        assert "unreachable" not in said.lower() and not got.value.transient


def test_a_usage_error_stays_usage(tmp_path):
    p = subprocess.run([RUNNER, "status", "--json", "--config", str(tmp_path / "none.toml")],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 2 and "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "field", ["step", "total_steps", "checkpoint_step", "eval_step", "best_step", "bad_lines"]
)
def test_a_negative_step_in_a_training_record_is_refused_by_name(field):
    with pytest.raises(StatusError, match=repr(field)):
        TrainRecord.from_dict({"phase": "training", field: -3})


def test_progress_is_clamped_to_the_bar(tmp_path):
    rec = TrainRecord.from_dict({"phase": "training", "step": 10**12, "total_steps": 8, "run_id": "r"})
    bar = train_blocks(rec)[0]["text"]["text"]
    assert bar.count("▓") == 20 and "100.0%" in bar and "100.0%" in render_train(rec)
    with pytest.raises(StatusError, match="'step'"):
        TrainRecord.from_dict({"phase": "training", "step": 10**400, "total_steps": 8})
    rec = TrainRecord.from_dict({"phase": "training", "step": 0, "total_steps": 8, "run_id": "r"})
    assert train_blocks(rec)[0]["text"]["text"].count("░") == 20
