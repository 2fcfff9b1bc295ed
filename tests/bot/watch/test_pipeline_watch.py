"""The watcher on the pipeline: a crash or failure alerts once per episode with a Resume button
that runs `/pipeline start`, each stage's start once per run in the thread, and done once with
what each stage handed on (the paths for operators only); the pure judging, then the real loop
against the recording Slack API on a fake runner's reply and on a run dir the real `hsx-runner
pipeline` reads (the Resume button on a fake reply: test_every_kind_watch.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from slack_sdk import WebClient

from bot.verbs.audit import without_paths
from bot.watch.pipeline_watch import judge
from bot.watch.watcher import Watcher, WatchState
from runner.contract.config import from_dict

from ..conftest import EXTRACTING
from ..http_bot import serve
from ..verbs.test_pipeline_chat import CRASHED, FOUR, RUNNING, WITH_PIPELINE

NOW = dt.datetime(2030, 1, 1, 11, 43, tzinfo=dt.timezone.utc)
HANDED = [
    "regenerate: 62 rows regenerated into /data/chat.regenerated.jsonl",
    "extract: 37,312 samples extracted and verified",
    "train: the draft trained and exported to /data/out-train/export",
    "measure: measured accept length 3.21 at 5/4/8",
]
DONE = {**RUNNING, "phase": "done", "stage": "measure", "ended_at": "2030-01-01T11:40:00Z", "handed": HANDED,
        "phases": dict.fromkeys(FOUR, "done"), "current": None}  # fmt: skip
FAILED = {**RUNNING, "phase": "failed", "ended_at": "2030-01-01T11:30:00Z",
          "reason": "the extract stage failed: the server died 3 times; /data/out/logs"}  # fmt: skip


def at(k: int, phase: str = "running", **kw) -> dict:
    """The pipeline with stage k (1-based) under way, the stages before it handed on."""
    return {**RUNNING, "phase": phase, "stage": FOUR[k - 1], "handed": HANDED[: k - 1], "current": None, **kw}


def run(replies: list[dict], kinds=("alert", "done", "milestone")):
    """What judge posts, reply after reply: (kind, headline, Resume button)."""
    st, out = WatchState(), []
    for d in replies:
        acts, st = judge(st, d, NOW)
        out += [(a.kind, a.text.split("\n")[0], a.resume) for a in acts if a.kind in kinds]
    return out


def test_a_crash_or_failure_alerts_once_per_episode_with_resume_and_the_reason_for_operators():
    posted = run([CRASHED, CRASHED, {**CRASHED, "pid": 7171}, {**CRASHED, "pid": 7171}])
    assert posted == [("alert", ":rotating_light: Pipeline CRASHED", True)] * 2
    (a,) = judge(WatchState(), CRASHED, NOW)[0]
    assert a.key.startswith("pipeline:") and "is gone; it was running" in a.private
    assert "pid 7070" not in a.text and "the pipeline crashed; ask an operator for the details" in a.text
    head = "pipeline crashed — stage 1 of 4: regenerate (crashed, 30 / 64 rows (46.9%))"
    assert a.text.splitlines()[1] == head
    assert run([FAILED, FAILED]) == [("alert", ":rotating_light: Pipeline FAILED", True)]
    (f,) = judge(WatchState(), FAILED, NOW)[0]
    assert "/data" not in f.text and "the server died 3 times; /data/out/logs" in f.private
    assert run([{**FAILED, "phase": "stopped"}]) == []  # an operator's stop is no alert


def test_each_stage_start_is_said_once_per_run_in_the_thread_and_a_resume_says_nothing_again():
    resumed = [at(2, "preflight"), at(1), at(2), at(3)]  # a start again walks the done stages
    posted = run([at(1), at(1), at(2), at(2), *resumed, at(3)], kinds=("milestone",))
    assert [h for _, h, _ in posted] == [
        "Pipeline stage 1 of 4: regenerate",
        "Pipeline stage 2 of 4: extract",
        "Pipeline stage 3 of 4: train",
    ]
    st = judge(WatchState(), at(1), NOW)[1]
    (m,) = judge(st, at(2), NOW)[0]
    assert m.text == "Pipeline stage 2 of 4: extract\nhanded on: regenerate: 62 rows regenerated"
    late = run([at(3)], kinds=("milestone",))  # a watcher that came late says where it is
    assert late == [("milestone", "Pipeline stage 3 of 4: train", False)]
    again = run([at(3), at(1, started_at="2030-01-02T00:00:00Z")], kinds=("milestone",))  # a new run
    assert [h for _, h, _ in again] == ["Pipeline stage 3 of 4: train", "Pipeline stage 1 of 4: regenerate"]
    assert run([{**RUNNING, "phase": "stopped", "started_at": None}]) == []  # never started


def test_done_is_said_once_with_what_each_stage_handed_on_the_paths_for_operators():
    posted = run([at(4), DONE, DONE, {**DONE, "ended_at": "2030-01-01T11:41:00Z"}])
    assert posted == [
        ("milestone", "Pipeline stage 4 of 4: measure", False),
        ("done", ":white_check_mark: Pipeline done: regenerate → extract → train → measure", False),
    ]
    (done,) = judge(WatchState(), DONE, NOW)[0]
    assert done.text.splitlines()[1:] == [
        "regenerate: 62 rows regenerated",
        "extract: 37,312 samples extracted and verified",
        "train: the draft trained and exported",
        "measure: measured accept length 3.21 at 5/4/8",
    ]
    assert done.private.splitlines()[1:] == HANDED
    assert without_paths("x: kept at /a/b and /c") == "x: kept and …"


def test_each_crashed_stage_the_pipeline_resumed_itself_is_said_once_after_its_start():
    one = "extract crashed at 208 / 400 samples (52.0%), resumed 1 of 3"
    two = "extract crashed at 300 / 400 samples (75.0%), resumed 2 of 3"
    healed = at(2, healed=[one], resumes={"extract": 1})
    posted = run([healed, healed, {**healed, "healed": [one, two]}])
    assert posted == [
        ("milestone", "Pipeline stage 2 of 4: extract", False),
        ("milestone", f"Pipeline: {one}", False),
        ("milestone", f"Pipeline: {two}", False),
    ]
    relaunched = {**healed, "pid": 7171, "healed": [one]}  # a start after a stop: its own budget
    assert run([healed, relaunched])[-1] == ("milestone", f"Pipeline: {one}", False)


def _tick(fake, cfg, bot, n: int = 1):
    for _ in range(n):
        Watcher(fake.box(), cfg, WebClient(token="x", base_url=bot.api), clock=lambda: NOW).tick()


def test_the_watcher_says_each_stage_in_the_thread_and_done_once_with_paths_by_dm(fake, cfg):
    cfg = dataclasses.replace(cfg, pipeline=WITH_PIPELINE)
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        for d in (at(1), at(2), at(2), DONE, DONE):
            fake.reply("pipeline-status", d)
            _tick(fake, cfg, bot)
        posts = bot.rec.named("chat.postMessage")
        (pinned,) = bot.rec.named("pins.add")  # the progress message, whose thread the stages go in
    thread = [p for p in posts if p.get("thread_ts") == pinned["timestamp"]]
    said = [p["text"].splitlines()[0] for p in thread if "Pipeline" in p["text"]]
    assert said == [
        "Pipeline stage 1 of 4: regenerate",
        "Pipeline stage 2 of 4: extract",
        ":white_check_mark: Pipeline done: regenerate → extract → train → measure",
    ]
    (done,) = [p for p in thread if "Pipeline done" in p["text"]]
    assert "accept length 3.21" in done["text"] and "/data" not in done["text"]
    (dm,) = [p for p in posts if p["channel"] == "U0OPERATOR" and "Pipeline done" in p["text"]]
    assert "exported to /data/out-train/export" in dm["text"]


def test_the_watcher_asks_nothing_of_the_pipeline_without_stages(fake, cfg):
    fake.reply("pipeline-status", CRASHED)
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        _tick(fake, cfg, bot)
    assert "pipeline" not in fake.verbs()


def test_a_run_dir_whose_supervisor_is_gone_alerts_once_through_the_real_runner(tmp_path):
    """The real `hsx-runner pipeline status` reads a status.json left running with no supervisor
    holding its lock as crashed; the watcher says it once, and its Resume button reaches the real
    runner's start (refused here: the box's config names no stages), audited."""
    from tests.conftest import RUNNER, write_config

    run_dir = tmp_path / "out-pipeline"
    run_dir.mkdir()
    left = {"phase": "running", "pid": 999999, "started_at": "2026-12-01T12:00:00Z",
            "heartbeat": "2026-12-01T12:05:00Z", "stage": "extract", "stages": ["regenerate", "extract"],
            "handed": [f"regenerate: 9 rows regenerated into {tmp_path}/data.regenerated.jsonl"]}  # fmt: skip
    (run_dir / "status.json").write_text(json.dumps(left))
    job = write_config(
        tmp_path / "job.toml",
        job={"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/data.jsonl", "out": f"{tmp_path}/out"},
    )
    cfg = from_dict(
        {
            "remote": {"transport": "local", "runner": RUNNER, "runner_config": job},
            "slack": {
                "alert_channel": "C0ALERTS",
                "operators": ["U0OPERATOR"],
                "audit_log": str(tmp_path / "ops" / "audit.jsonl"),
            },  # fmt: skip
            "watcher": {"state_file": str(tmp_path / "ops" / "watch.json")},
            "pipeline": {"stages": ["regenerate", "extract"]},
        },
        base_dir=str(tmp_path),
        source=str(tmp_path / "ops.toml"),
    )
    from bot.wiring import open_box

    box = open_box(cfg)
    with serve(cfg, box=box) as (bot, _, _):
        for _ in range(2):
            Watcher(box, cfg, WebClient(token="x", base_url=bot.api), clock=lambda: NOW).tick()
        crashes = [p for p in bot.rec.named("chat.postMessage") if "Pipeline CRASHED" in p["text"]]
        (alert,) = [p for p in crashes if p["channel"] == "C0ALERTS"]
        (dm,) = [p for p in crashes if p["channel"] == "U0OPERATOR"]
        assert "stage 2 of 2: extract" in alert["text"] and "pid 999999" in dm["text"]
        assert str(tmp_path) not in alert["text"] and f"{tmp_path}/data.regenerated.jsonl" in dm["text"]
        blocks = json.loads(alert["blocks"]) if isinstance(alert["blocks"], str) else alert["blocks"]
        assert bot.click("hsx_resume", blocks[1]["elements"][0]["value"]) == 200
        (resp,) = bot.rec.wait_for("response")
        assert "`pipeline start` refused: no pipeline: set [pipeline] stages" in resp["text"]
        assert [(e["action"], e["result"]) for e in bot.audit()] == [
            ("pipeline start", "attempt"),
            ("pipeline start", "refused"),
        ]


def test_inside_a_pipeline_its_stages_crash_is_one_alert_the_pipelines(fake, cfg):
    """The stage's own CRASHED (with `/extract resume`) is folded into the pipeline's: nothing while
    the pipeline heals it, one Pipeline FAILED (with `/pipeline start`) when it gives up; a crash
    of the stage run again by hand after the pipeline ended is the stage's own alert again."""
    cfg = dataclasses.replace(cfg, pipeline=WITH_PIPELINE)
    crashed = {**EXTRACTING, "phase": "crashed", "alive": False, "reason": "runner (pid 4242) is gone",
               "phase_since": "2030-01-01T11:20:00Z", "heartbeat_at": "2030-01-01T11:20:00Z"}  # fmt: skip
    fake.reply("status", crashed)
    fake.reply("pipeline-status", at(2))  # running: its supervisor resumes the stage
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        _tick(fake, cfg, bot, 2)
        assert [p for p in bot.rec.named("chat.postMessage") if p["channel"] == "C0ALERTS"
                and "rotating_light" in p["text"]] == []  # fmt: skip
        fake.reply("pipeline-status", FAILED)  # its budget spent: it ended at the extract stage, 11:30
        _tick(fake, cfg, bot, 2)
        alerts = [p["text"].splitlines()[0] for p in bot.rec.named("chat.postMessage")
                  if p["channel"] == "C0ALERTS" and "rotating_light" in p["text"]]  # fmt: skip
        assert alerts == [":rotating_light: Pipeline FAILED"]
        again = {**crashed, "phase_since": "2030-01-01T11:40:00Z", "heartbeat_at": "2030-01-01T11:40:00Z"}
        fake.reply("status", again)  # `/extract resume` by hand after it, crashed again at 11:40
        _tick(fake, cfg, bot)
        alerts = [p["text"].splitlines()[0] for p in bot.rec.named("chat.postMessage")
                  if p["channel"] == "C0ALERTS" and "rotating_light" in p["text"]]  # fmt: skip
    assert alerts == [":rotating_light: Pipeline FAILED", ":rotating_light: Extraction CRASHED on gpu-1"]
