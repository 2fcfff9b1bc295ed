"""`hsx-runner pipeline` through the client: the real runner reading a run dir's status.json,
and a fake runner's replies checked."""

from __future__ import annotations

import json

import pytest

from remote.errors import BadReply
from runner.text.pipeline import render_pipeline

from .conftest import EXTRACTING
from .test_regenerate_chat import CRASHED as REGEN_CRASHED

FOUR = ["regenerate", "extract", "train", "measure"]
RUNNING = {
    "phase": "running", "pid": 7070, "heartbeat": "2030-01-01T11:42:00Z", "started_at": "2030-01-01T08:00:00Z",
    "ended_at": None, "reason": "", "stage": "extract", "stages": FOUR, "run_dir": "/data/out-pipeline",
    "handed": ["regenerate: 62 rows regenerated into /data/chat.regenerated.jsonl"],
    "phases": {"regenerate": "done", "extract": "extracting", "train": "stopped", "measure": "stopped"},
    "current": EXTRACTING,
}  # fmt: skip
CRASHED = {
    **RUNNING, "phase": "crashed", "stage": "regenerate", "handed": [],
    "reason": "pipeline's supervisor (pid 7070) is gone; it was running at its last heartbeat",
    "phases": {"regenerate": "crashed", "extract": "stopped", "train": "stopped", "measure": "stopped"},
    "current": REGEN_CRASHED,
}  # fmt: skip


def test_the_real_runner_answers_pipeline_status_from_the_run_dir_and_refuses_a_start(tmp_path):
    """The real `hsx-runner pipeline status|start --json` through the client: an empty run dir
    reads as not started; a record whose supervisor is gone reads as crashed, with each stage's
    phase and the stage's own record; a start where the box's config names no stages is refused
    (an answer, not a failed command); a reply whose parts are not what they say is a BadReply."""
    from remote.client import GpuBox, pipeline_reply
    from remote.transport import LocalTransport
    from runner.contract.errors import StatusError
    from runner.contract.replies import Answer
    from tests.conftest import RUNNER, write_config

    run = tmp_path / "out-pipeline"
    job = write_config(
        tmp_path / "job.toml",
        job={"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/data.jsonl", "out": f"{tmp_path}/out"},
    )
    box = GpuBox(LocalTransport(), RUNNER, job, timeout_s=60)
    d = box.pipeline_status()
    assert not d["started_at"] and d["phase"] == "stopped" and d["run_dir"] == str(run)
    assert render_pipeline(d) == "pipeline: not started (`/pipeline start`)"

    run.mkdir()
    left = {"phase": "running", "pid": 999999, "started_at": "2026-12-01T12:00:00Z",
            "heartbeat": "2026-12-01T12:05:00Z", "stage": "regenerate", "stages": ["regenerate", "extract"]}  # fmt: skip
    (run / "status.json").write_text(json.dumps(left))
    d = box.pipeline_status()
    assert d["phase"] == "crashed" and "pid 999999" in d["reason"]
    assert d["phases"] == {"regenerate": "stopped", "extract": "stopped"}
    assert d["current"]["phase"] == "stopped"  # the regeneration's own record: never started
    assert render_pipeline(d).splitlines()[0] == "pipeline crashed — stage 1 of 2: regenerate (not started)"

    answer = Answer.from_dict(box.pipeline("start"))
    assert not answer.ok and "no pipeline: set [pipeline] stages" in answer.message
    with pytest.raises(ValueError, match="the action must be one of"):
        box.pipeline("resume")
    for bad, why in (({**left, "phases": []}, "'phases'"), ({**left, "current": 3}, "'current'"),
                     ({**left, "stage": "bake"}, "unknown stage")):  # fmt: skip
        with pytest.raises(StatusError, match=why):
            pipeline_reply(bad)


def test_a_bad_reply_is_said_plainly(fake):
    fake.reply("pipeline-status", {**RUNNING, "phases": ["regenerate"]})
    with pytest.raises(BadReply, match="'phases' is not an object"):
        fake.box().pipeline_status()
