"""`/regenerate VERB` and `hsx regenerate VERB`: the client against the real `hsx-runner regenerate`
reading a run dir's status.json, then the bot's signed HTTP endpoint with a fake runner that
answers `hsx-runner regenerate ACTION --json` with canned records."""

from __future__ import annotations

import json
import os

import pytest

from runner.text.regenerate import render_regenerate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POINT = {"t": "2026-12-01T12:01:00Z", "done": 2, "failed": 0, "tokens_per_s": 10.0, "rows_per_s": 0.1}


def test_the_real_runner_answers_regenerate_status_from_the_run_dir_and_refuses_a_start(tmp_path):
    """The real `hsx-runner regenerate status|start --json` through the client: an empty run dir
    reads as not started; a record whose supervisor is gone reads as crashed, with its history;
    a start without a dataset is refused (an answer, not a failed command)."""
    from remote.client import GpuBox
    from remote.transport import LocalTransport
    from runner.contract.replies import Answer
    from tests.conftest import RUNNER, write_config

    run = tmp_path / "out-regenerate"
    job = write_config(
        tmp_path / "job.toml",
        job={"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/data.jsonl", "out": f"{tmp_path}/out"},
        regenerate={"run_dir": str(run)},
    )
    box = GpuBox(LocalTransport(), RUNNER, job, timeout_s=60)
    rec = box.regenerate_status()
    assert not rec.started_at and not rec.active and rec.run_dir == str(run)
    assert render_regenerate(rec) == "regeneration: not started (`/regenerate start`)"

    run.mkdir()
    left = {"phase": "regenerating", "pid": 999999, "started_at": "2026-12-01T12:00:00Z",
            "heartbeat": "2026-12-01T12:05:00Z", "done": 5, "total": 10}  # fmt: skip
    (run / "status.json").write_text(json.dumps(left))
    (run / "history.jsonl").write_text(json.dumps(POINT) + "\n")
    rec, points = box.regenerate_history()
    assert rec.phase == "crashed" and "pid 999999" in (rec.reason or "") and (rec.done, rec.total) == (5, 10)
    assert points == [POINT]

    answer = Answer.from_dict(box.regenerate("start"))
    assert not answer.ok and "no dataset at" in answer.message
    with pytest.raises(ValueError, match="the action must be one of"):
        box.regenerate("export")
