"""The watcher's saved state: a file saved before the kinds had their own parts loads so that a
restart of the bot after the upgrade posts nothing twice, and a post Slack refused is posted at
the next tick, whichever kind it is (real watcher ticks against the recording Slack API)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import sys

from slack_sdk import WebClient

from bot.watch.watcher import Limits, Observation, Watcher, WatchState, decide
from remote.errors import BadReply
from runner.contract.status import StatusRecord

from .. import slack_api
from ..conftest import EXTRACTING
from ..verbs.test_train_chat import TRAINING

T0 = dt.datetime(2030, 1, 1, 11, 43, tzinfo=dt.timezone.utc)
DISK = {"path": "/data", "used": 10, "free": 100, "need": 500}  # a forecast that the disk runs out
STALL = "train:stalled:hsx:1:2026-12-01T12:01:00.000Z"  # TRAINING's last step, years before T0
# What the watcher saved before the kinds had their parts: the extraction at 60% with its disk
# alert, the training's NaN and stall alerts, its 50% and its eval at step 60, all posted.
OLD = {
    "job": "eagle3:37312", "milestone": 60, "active": ["disk:2030-01-01T09:00:00Z"],
    "background": "", "errors": 0, "run": "2030-01-01T09:00:00Z", "phase": "extracting",
    "unreachable_since": None, "progress_channel": "C0PROGRESS", "progress_ts": "1700000000.000001",
    "progress_at": "2030-01-01T11:43:00Z", "train_active": [STALL, "train:nan:hsx:1"],
    "train_zero_steps": [], "train_quiet": STALL, "train_run": "hsx:2026-12-01T12:00:00.000Z",
    "train_milestone": 50, "train_eval_step": 60,
}  # fmt: skip
NAN_AT_EVAL = {**TRAINING, "loss": "nan", "nan_loss": True, "eval_step": 60, "val_acc": 0.38, "acc_len": 1.86}


def _slack():
    rec = slack_api.Recorder()
    server, api = slack_api.start(rec)
    return rec, server, WebClient(token="xoxb-test", base_url=api)


def _heads(rec) -> list[str]:
    return [p["text"].split("\n")[0] for p in rec.named("chat.postMessage")]


def test_a_state_saved_before_the_kinds_posts_nothing_again(fake, cfg):
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))
    fake.set_status(disk=DISK, heartbeat_at=T0.isoformat())
    fake.reply("train-status", NAN_AT_EVAL)
    os.makedirs(os.path.dirname(cfg.watcher.state_file), exist_ok=True)
    with open(cfg.watcher.state_file, "w") as f:
        json.dump(OLD, f)
    rec, server, client = _slack()
    try:
        for when in (T0, T0, T0 + dt.timedelta(minutes=1)):  # the upgraded bot, restarted again
            Watcher(fake.box(), cfg, client, clock=lambda t=when: t).tick()
        assert _heads(rec) == []
        fake.set_status(done=26200)  # 70%: what is new is still said
        fake.reply("train-status", {**NAN_AT_EVAL, "eval_step": 80})
        Watcher(fake.box(), cfg, client, clock=lambda: T0 + dt.timedelta(minutes=2)).tick()
        assert _heads(rec) == ["70% reached", ":bar_chart: Training eval at step 80: val acc 38.0% · "
                               "simulated accept length ~2.86"]  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreadable_episode_saved_before_the_kinds_is_not_said_again(tmp_path):
    path = str(tmp_path / "watch.json")
    with open(path, "w") as f:
        json.dump({**OLD, "active": ["disk:2030-01-01T09:00:00Z", "unreadable:2030-01-01T11:40:00Z"]}, f)
    err = BadReply("status record field 'pid' is not an integer or null (got str)")
    acts, _ = decide(WatchState.load(path), Observation(T0, error=err, since=T0), Limits())
    assert acts == []


def test_a_refused_post_of_each_kind_is_posted_at_the_next_tick_once(fake, cfg):
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))
    fake.set_status(disk=DISK, heartbeat_at=T0.isoformat())  # 60% and the disk alert
    fake.reply("train-status", NAN_AT_EVAL)  # 50%, its eval, the NaN and the stall
    rec, server, client = _slack()
    try:
        rec.fail.add("chat.postMessage")
        Watcher(fake.box(), cfg, client, clock=lambda: T0).tick()
        rec.fail.clear()
        refused = _heads(rec)
        assert len(refused) == 7  # the progress message too
        for _ in range(2):
            Watcher(fake.box(), cfg, client, clock=lambda: T0).tick()
        heads = _heads(rec)
        for said in ("60% reached", ":rotating_light: Disk will run out", "Training 50% reached",
                     ":bar_chart: Training eval at step 60", ":rotating_light: Training loss is NaN",
                     ":warning: Training STALLED"):  # fmt: skip
            assert sum(h.startswith(said) for h in heads) == 2, (said, heads)
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_milestone_of_a_new_job_counts_from_that_jobs_start():
    """The last job ended done (its milestones at 100); the next one's first milestone, refused,
    is posted again: the undo does not bring back the last job's 100."""
    done = StatusRecord.from_dict(
        {**EXTRACTING, "phase": "done", "done": 37312, "heartbeat_at": T0.isoformat()}
    )
    _, prev = decide(WatchState(), Observation(T0, record=done), Limits())
    new = StatusRecord.from_dict({**EXTRACTING, "job": "next", "done": 4000, "heartbeat_at": T0.isoformat()})
    acts, st = decide(prev, Observation(T0, record=new), Limits())
    (refused,) = [a for a in acts if a.kind == "milestone"]
    st.undelivered(prev, refused)
    acts, _ = decide(st, Observation(T0, record=new), Limits())
    assert [a.text.split("\n")[0] for a in acts if a.kind == "milestone"] == ["10% reached"]
