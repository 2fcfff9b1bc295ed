"""The pipeline from one command on the demo, all real: the target regenerates the answers, the
extraction reads the regenerated dataset, SpecForge's trainer trains the draft on it. Each stage
killed with -9 once is resumed by the pipeline itself, with no command; the pipeline's own
supervisor killed once, ``pipeline start`` resumes it where it stopped; it ends done with the
draft exported, each resume counted."""

from __future__ import annotations

import json
import os
import signal

import pytest

from runner.contract.config import load
from runner.contract.train import PACE_ENV as TRAIN_PACE_ENV
from runner.data import demo_assets
from tests.conftest import specforge_train_python
from tests.runner.helpers import runner_json, wait_for

pytestmark = pytest.mark.slow  # real servers, supervisors and a trainer
SAMPLES = 16


def _status(conf) -> dict:
    code, d = runner_json("pipeline", conf, "status")
    assert code == 0, d
    return d


def _start(conf) -> int:
    code, d = runner_json("pipeline", conf, "start")
    assert code == 0 and d["started"], d
    return d["pid"]


def _at(conf, stage, pred=lambda cur: True, timeout=300.0) -> dict:
    """The status once ``stage`` is under way and ``pred`` holds of its own record."""

    def ok():
        d = _status(conf)
        cur = d.get("current") or {}
        return d["stage"] == stage and cur.get("phase") not in (None, "stopped", "done") and pred(cur)

    wait_for(ok, timeout, 0.1, f"the {stage} stage under way")
    return _status(conf)


def _ended(conf, timeout=600.0) -> dict:
    wait_for(
        lambda: _status(conf)["phase"] in ("done", "failed", "stopped", "crashed"), timeout, 0.2, "its end"
    )
    return _status(conf)


def test_one_command_takes_the_prompts_to_a_trained_draft_through_a_kill_in_each_stage(tmp_path, monkeypatch):
    specforge_train_python()
    conf = demo_assets.build(str(tmp_path / "d"), SAMPLES, 0)
    text = (
        open(conf)
        .read()
        .replace("max_steps = 120", "max_steps = 12")
        .replace("save_interval = 20", "save_interval = 4")
    )
    text += '\n[regenerate]\nmax_new_tokens = 16\nconcurrency = 1\n\n[pipeline]\nstages = ["regenerate", "extract", "train"]\n'
    with open(conf, "w") as f:
        f.write(text)
    # paced as the demo's console is (every process the pipeline starts reads it): each stage
    # lasts long enough for its kill to land inside it
    monkeypatch.setenv(demo_assets.PACE_ENV, "0.25")
    monkeypatch.setenv(TRAIN_PACE_ENV, "0.5")
    cfg = load(conf)
    assert cfg.job.dataset == str(
        tmp_path / "d" / "data.regenerated.jsonl"
    )  # the extraction reads the target's

    pid = _start(conf)
    d = _at(conf, "regenerate", lambda cur: cur.get("done", 0) >= 3)
    os.kill(d["current"]["pid"], signal.SIGKILL)  # the pipeline resumes its stage itself
    wait_for(lambda: _status(conf)["resumes"] == {"regenerate": 1}, 120, 0.1, "the regeneration resumed")
    _at(conf, "regenerate", lambda cur: cur["phase"] == "starting_server")  # it has rows to do yet
    assert _status(conf)["phase"] == "running"
    os.kill(pid, signal.SIGKILL)  # the pipeline itself: its stage runs on
    wait_for(lambda: _status(conf)["phase"] == "crashed", 60, 0.1, "the pipeline read as crashed")
    _start(conf)  # waits on the stage it finds running, then goes on

    d = _at(conf, "extract", lambda cur: cur.get("pid") is not None)
    os.kill(d["current"]["pid"], signal.SIGKILL)
    d = _at(conf, "train", lambda cur: (cur.get("step") or 0) >= 5, timeout=600)
    assert d["phases"]["regenerate"] == "done" and d["resumes"] == {"extract": 1}
    os.kill(d["current"]["supervisor_pid"], signal.SIGKILL)

    end = _ended(conf)
    assert end["phase"] == "done", end
    assert end["resumes"] == {"extract": 1, "train": 1}  # this launch's, with no command
    assert [h.split(" crashed at ")[0] for h in end["healed"]] == ["extract", "train"]
    assert end["healed"][1].startswith("train crashed at step ") and end["healed"][1].endswith(
        "resumed 1 of 3"
    )
    assert end["stages"] == ["regenerate", "extract", "train"] and set(end["phases"].values()) == {"done"}, (
        end
    )
    assert [h.split(":")[0] for h in end["handed"]] == ["regenerate", "extract", "train"]
    rows = [json.loads(x)["row"] for x in open(tmp_path / "d" / "out-regenerate" / "rows.jsonl")]
    assert sorted(rows) == list(range(SAMPLES))  # each row once, through a kill
    with open(cfg.job.dataset) as f:
        assert sum(1 for _ in f) == SAMPLES
    code, st = runner_json("status", conf)
    assert st["done"] == SAMPLES
    with open(os.path.join(cfg.job.out, "dataset.json")) as f:  # the dataset the extraction pinned
        assert json.load(f)["dataset"] == cfg.job.dataset
    assert end["current"]["step"] == 12 and os.path.isfile(
        os.path.join(end["current"]["export_dir"], "config.json")
    )
