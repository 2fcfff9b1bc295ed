"""The watcher on the training record: crash (with Resume), NaN loss and the zero loss-and-acc
trap, each once per episode, and done with the export path; the pure judging, then the real
loop against the recording Slack API and the Resume button through the signed endpoint."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys

from slack_sdk import WebClient

from bot.train_watch import ZERO_LOGS, judge
from bot.watcher import Watcher, WatchState
from runner.contract.train import TrainRecord

from .http_bot import STRANGER, serve
from .test_train_chat import TRAINING

T0 = dt.datetime(2030, 1, 1, 11, 43, tzinfo=dt.timezone.utc)
CRASHED = {**TRAINING, "phase": "crashed", "launches": 1,
           "reason": "the trainer exited with code 1: RuntimeError: CUDA out of memory; "
                     "the last complete checkpoint is step 50"}  # fmt: skip


def run(records: list[dict]) -> list[tuple[str, str, bool]]:
    st, out = WatchState(), []
    for d in records:
        acts, st = judge(st, TrainRecord.from_dict(d))
        out += [(a.kind, a.text.split("\n")[0], a.resume) for a in acts]
    return out


def test_a_crash_alerts_once_with_resume_and_again_after_the_next_launch_crashes():
    posted = run([TRAINING, CRASHED, CRASHED, {**CRASHED, "launches": 2}])
    assert len(posted) == 2 and all(kind == "alert" and resume for kind, _, resume in posted)
    assert posted[0][1] == ":rotating_light: Training CRASHED: RuntimeError: CUDA out of memory"


def test_a_nan_loss_alerts_once():
    nan = {**TRAINING, "loss": "nan", "nan_loss": True}
    posted = run([TRAINING, nan, {**nan, "step": 61}, {**nan, "step": 62}])
    assert posted == [("alert", ":rotating_light: Training loss is NaN at step 60", False)]


def test_loss_and_acc_zero_over_several_logs_alerts_once():
    zero = {**TRAINING, "loss": 0.0, "acc": 0.0}
    steps = [{**zero, "step": 10 * i} for i in range(1, ZERO_LOGS + 3)]
    assert run([zero] * 5) == []  # the same log read again is not several logs
    posted = run(steps)
    assert len(posted) == 1 and "loss and acc both 0" in posted[0][1]
    assert (
        run([{**zero, "step": 10}, {**zero, "step": 20}, {**TRAINING, "step": 30}, {**zero, "step": 40}])
        == []
    )


def test_done_is_posted_once_with_the_export_path():
    done = {**TRAINING, "phase": "done", "step": 120, "ended_at": "2026-12-01T12:02:00.000Z"}
    posted = run([TRAINING, done, done])
    assert len(posted) == 1 and posted[0][0] == "done"
    _, st = judge(WatchState(), TrainRecord.from_dict(TRAINING))
    (a,) = judge(st, TrainRecord.from_dict(done))[0]
    assert "/data/out-train/export" in a.text


def test_the_watcher_posts_the_crash_and_its_resume_button_runs_train_resume(fake, cfg):
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))
    fake.reply("train-status", CRASHED)
    fake.reply("train-resume", {"started": True, "pid": 78, "message": "training resumed (trainer pid 78)"})
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        Watcher(fake.box(), cfg, WebClient(token="x", base_url=bot.api), clock=lambda: T0).tick()
        Watcher(fake.box(), cfg, WebClient(token="x", base_url=bot.api), clock=lambda: T0).tick()
        (alert,) = [p for p in bot.rec.named("chat.postMessage") if "Training CRASHED" in p["text"]]
        blocks = json.loads(alert["blocks"]) if isinstance(alert["blocks"], str) else alert["blocks"]
        button = blocks[1]["elements"][0]
        assert button["action_id"] == "hsx_resume"

        assert bot.click("hsx_resume", button["value"], user=STRANGER) == 200
        (refusal,) = bot.rec.wait_for("response")
        assert "refused" in refusal["text"]
        assert bot.click("hsx_resume", button["value"]) == 200
        resumed = bot.rec.wait_for("response", 2)[1]
        assert "training resumed" in resumed["text"]
        train_calls = [c[-1] for c in fake.calls() if c[0] == "train"]
        assert train_calls.count("resume") == 1 and "resume" not in fake.verbs()  # not the extraction's
        assert [(e["action"], e["result"][:7]) for e in bot.audit()] == [
            ("train resume", "refused"),
            ("train resume", "attempt"),
            ("train resume", "ok"),
        ]
