"""`/pipeline VERB` and `hsx pipeline VERB`: the client against the real `hsx-runner pipeline`
reading a run dir's status.json, then the bot's signed HTTP endpoint with a fake runner that
answers `hsx-runner pipeline ACTION --json` with canned replies, and "progress?" beginning with
the pipeline."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from bot import cli
from bot.verbs.pipeline import render, stage_text
from remote.errors import BadReply
from runner.contract.stages import PipelineConfig

from ..conftest import EXTRACTING
from ..http_bot import OPERATOR, STRANGER, serve
from .test_regenerate_chat import CRASHED as REGEN_CRASHED

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
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
WITH_PIPELINE = PipelineConfig(stages=FOUR)


def test_the_real_runner_answers_pipeline_status_from_the_run_dir_and_refuses_a_start(tmp_path):
    """The real `hsx-runner pipeline status|start --json` through the client: an empty run dir
    reads as not started; a record whose supervisor is gone reads as crashed, with each stage's
    phase and the stage's own record; a start where the box's config names no stages is refused
    (an answer, not a failed command); a reply whose parts are not what they say is a BadReply."""
    from remote.client import GpuBox
    from remote.transport import LocalTransport
    from runner.contract.errors import StatusError
    from runner.contract.pipeline import check_reply
    from runner.contract.replies import Answer
    from tests.conftest import RUNNER, write_config

    run = tmp_path / "out-pipeline"
    job = write_config(
        tmp_path / "job.toml",
        job={"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/data.jsonl", "out": f"{tmp_path}/out"},
    )
    box = GpuBox(LocalTransport(), RUNNER, job, timeout_s=60)
    d = box.record("pipeline")
    assert not d["started_at"] and d["phase"] == "stopped" and d["run_dir"] == str(run)
    assert render(d) == "pipeline: not started (`/pipeline start`)"

    run.mkdir()
    left = {"phase": "running", "pid": 999999, "started_at": "2026-12-01T12:00:00Z",
            "heartbeat": "2026-12-01T12:05:00Z", "stage": "regenerate", "stages": ["regenerate", "extract"]}  # fmt: skip
    (run / "status.json").write_text(json.dumps(left))
    d = box.record("pipeline")
    assert d["phase"] == "crashed" and "pid 999999" in d["reason"]
    assert d["phases"] == {"regenerate": "stopped", "extract": "stopped"}
    assert d["current"]["phase"] == "stopped"  # the regeneration's own record: never started
    lines = render(d).splitlines()
    assert lines[0] == "pipeline crashed — stage 1 of 2: regenerate (not started)"
    assert lines[-1] == "regeneration: not started (`/regenerate start`)"

    answer = Answer.from_dict(box.call("pipeline", "start"))
    assert not answer.ok and "no pipeline: set [pipeline] stages" in answer.message
    with pytest.raises(ValueError, match="the action must be one of"):
        box.call("pipeline", "resume")
    for bad, why in (({**left, "phases": []}, "'phases'"), ({**left, "current": 3}, "'current'"),
                     ({**left, "stage": "bake"}, "unknown stage")):  # fmt: skip
        with pytest.raises(StatusError, match=why):
            check_reply(bad)


def test_a_bad_reply_is_said_plainly(fake, cfg):
    fake.reply("pipeline-status", {**RUNNING, "phases": ["regenerate"]})
    with pytest.raises(BadReply, match="'phases' is not an object"):
        fake.box().record("pipeline")
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        assert bot.command("status", command="/pipeline") == 200
        (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral" and "'phases' is not an object" in resp["text"]


def test_the_stage_under_way_is_said_in_its_own_kinds_words_or_by_its_phase():
    assert stage_text(RUNNING).startswith("25,581 / 37,312 — 68.6% done")
    assert stage_text(CRASHED, full=False).startswith("regeneration crashed — 30 / 64 rows")
    unread = {**RUNNING, "stage": "train", "phases": {**RUNNING["phases"], "train": "failed"},
              "current": {"phase": "failed", "reason": "its status answered exit code 2"}}  # fmt: skip
    assert stage_text(unread) == "train: failed"
    assert stage_text({**RUNNING, "current": None}) == ""


def test_pipeline_status_tells_an_operator_the_paths_and_a_member_whom_to_ask(fake, cfg):
    fake.reply("pipeline-status", RUNNING)
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        assert bot.command("status", command="/pipeline") == 200
        (resp,) = bot.rec.wait_for("response")
        fake.reply("pipeline-status", CRASHED)
        assert bot.command("status", user=STRANGER, command="/pipeline") == 200
        _, member = bot.rec.wait_for("response", 2)
    assert resp["response_type"] == "in_channel"
    lines = resp["text"].splitlines()
    assert lines[:3] == [
        "pipeline running — stage 2 of 4: extract (extracting, 25,581 / 37,312 samples (68.6%))",
        "regenerate done → extract extracting → train waiting → measure waiting",
        "this stage's ETA ~2h49m; the stages after it are timed once they start",
    ]
    assert "handed on: regenerate: 62 rows regenerated into /data/chat.regenerated.jsonl" in lines
    assert lines[lines.index("") + 1].startswith("25,581 / 37,312 — 68.6% done")  # the extraction's own words
    text = member["text"]
    assert text.startswith("pipeline crashed — stage 1 of 4: regenerate (crashed, 30 / 64 rows (46.9%))")
    assert f"the pipeline crashed; ask an operator (<@{OPERATOR}>)" in text
    assert "`/pipeline start` resumes it where it stopped" in text
    assert "regeneration crashed — 30 / 64 rows (46.9%)" in text  # the stage's own, a member's
    assert "/data" not in text and "7070" not in text and "5151" not in text
    assert fake.calls() == [fake.argv("pipeline", "status")] * 2


def test_hsx_pipeline_status_json_prints_the_reply_and_plain_the_operators_text(fake, conf, capsys, patient):
    fake.reply("pipeline-status", RUNNING)
    assert cli.main(["pipeline", "status", "--json", "--config", conf]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["stage"] == "extract" and said["current"]["done"] == 25581  # the runner's reply as it is
    assert cli.main(["pipeline", "status", "--config", conf]) == 0
    said = capsys.readouterr().out.splitlines()  # the operator's text: a terminal is one
    assert said[0].startswith("pipeline running — stage 2 of 4: extract")
    assert "handed on: regenerate: 62 rows regenerated into /data/chat.regenerated.jsonl" in said
    assert [c[-1] for c in fake.calls()] == ["status", "status"]


def test_progress_begins_with_the_pipeline_when_it_has_stages(fake, cfg):
    event = {"type": "message", "channel": "C0PROGRESS", "user": STRANGER, "text": "progress?", "ts": "1.1"}
    fake.reply("pipeline-status", RUNNING)
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):  # no [pipeline] stages: not asked
        assert bot.event(event, "Ev0001") == 200
        (before,) = bot.rec.wait_for("chat.postMessage")
    assert "pipeline" not in fake.verbs() and "pipeline" not in before["text"]

    used = dataclasses.replace(cfg, pipeline=WITH_PIPELINE)
    with serve(used, box=fake.box(), fake=fake) as (bot, _, _):
        assert bot.event({**event, "ts": "1.2"}, "Ev0002") == 200
        (after,) = bot.rec.wait_for("chat.postMessage")
    lines = after["text"].splitlines()
    assert lines[:3] == [
        "pipeline running — stage 2 of 4: extract (extracting, 25,581 / 37,312 samples (68.6%))",
        "regenerate done → extract extracting → train waiting → measure waiting",
        "this stage's ETA ~2h49m; the stages after it are timed once they start",
    ]
    assert lines[4].startswith("25,581 / 37,312 — 68.6% done")  # then the extraction's answer, as before
    assert "handed on" not in after["text"] and "chat.regenerated" not in after["text"]  # a member's
    blocks = after["blocks"] if isinstance(after["blocks"], list) else json.loads(after["blocks"])
    assert blocks[0]["text"]["text"].startswith("pipeline running — stage 2 of 4: extract")
    assert fake.verbs().count("pipeline") == 1


def test_progress_in_a_pipelines_first_stage_leaves_out_the_extraction_not_reached_yet(fake, cfg):
    """Regenerating: the extraction has not started, and it is no news that it has not."""
    fake.reply("pipeline-status", {**CRASHED, "phase": "running", "reason": ""})
    fake.reply("status", {"job": "chat", "phase": "stopped", "reason": "not started yet"})
    used = dataclasses.replace(cfg, pipeline=WITH_PIPELINE)
    event = {"type": "message", "channel": "C0PROGRESS", "user": STRANGER, "text": "progress?", "ts": "1.3"}
    with serve(used, box=fake.box(), fake=fake) as (bot, _, _):
        assert bot.event(event, "Ev0003") == 200
        (said,) = bot.rec.wait_for("chat.postMessage")
    assert said["text"].startswith("pipeline running — stage 1 of 4: regenerate")
    assert "/extract start" not in said["text"] and "Not started" not in said["text"]
