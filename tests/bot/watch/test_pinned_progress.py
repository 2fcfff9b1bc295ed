"""The watcher's pinned progress message says what "progress?" says of what runs now: a pipeline's
line first and its stage under way in that kind's words, edited in place as the stages move (at
most every PROGRESS_UPDATE_S, at once when a phase or the stage changes); a lone training,
measurement or regeneration gets its own progress there too, and the message keeps the last run
it showed, in its end, once nothing runs. Through the real loop against the recording Slack API."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys

from slack_sdk import WebClient

from bot.watch.watcher import Watcher

from ..conftest import EXTRACTING
from ..verbs.test_measure_chat import MEASURING_REC
from ..verbs.test_pipeline_chat import RUNNING as EXTRACT_STAGE
from ..verbs.test_pipeline_chat import WITH_PIPELINE
from ..verbs.test_regenerate_chat import RUNNING as REGENERATING
from ..verbs.test_train_chat import TRAINING
from .test_watcher import T0 as NOW

NOT_STARTED = {"job": "chat", "phase": "stopped", "reason": "not started yet"}
REGENERATE_STAGE = {
    **EXTRACT_STAGE, "stage": "regenerate", "handed": [], "current": REGENERATING,
    "phases": {"regenerate": "regenerating", "extract": "stopped", "train": "stopped", "measure": "stopped"},
}  # fmt: skip
TRAIN_STAGE = {
    **EXTRACT_STAGE, "stage": "train", "current": TRAINING,
    "handed": [*EXTRACT_STAGE["handed"], "extract: 37,312 samples extracted and verified"],
    "phases": {"regenerate": "done", "extract": "done", "train": "training", "measure": "stopped"},
}  # fmt: skip
EXTRACTED = {**EXTRACTING, "phase": "done", "done": 37312, "eta_s": None}


def _blocks(call: dict) -> str:
    b = call.get("blocks")
    return json.dumps(json.loads(b) if isinstance(b, str) else b, ensure_ascii=False)


class Channel:
    """The recording Slack API and a watcher made anew each tick (as after a bot restart), its
    clock where the test sets it."""

    def __init__(self, fake, cfg):
        from .. import slack_api

        self.fake, self.cfg, self.now = fake, cfg, NOW
        self.rec = slack_api.Recorder()
        self.server, api = slack_api.start(self.rec)
        self.client = WebClient(token="xoxb-test", base_url=api)

    def tick(self, at: dt.datetime | None = None) -> None:
        self.now = at or self.now
        Watcher(self.fake.box(), self.cfg, self.client, clock=lambda: self.now).tick()

    def edits(self) -> list[dict]:
        return self.rec.named("chat.update")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _first_post(rec) -> dict:
    """The message that was pinned: the first post outside any thread in the channel."""
    (pin,) = rec.named("pins.add")
    posts = rec.named("chat.postMessage")
    return [p for p in posts if p["channel"] == pin["channel"] and not p.get("thread_ts")][0]


def test_a_pipelines_pinned_message_names_it_and_its_stage_under_way_edited_as_the_stages_move(fake, cfg):
    cfg = dataclasses.replace(cfg, pipeline=WITH_PIPELINE)
    ch = Channel(fake, cfg)
    try:
        fake.set_status(NOT_STARTED)
        fake.reply("pipeline-status", REGENERATE_STAGE)
        ch.tick()
        (pin,) = ch.rec.named("pins.add")
        first = _first_post(ch.rec)
        lines = first["text"].splitlines()
        assert lines[0] == "pipeline running — stage 1 of 4: regenerate (regenerating, 30 / 64 rows (46.9%))"
        assert "regenerating — 30 / 64 rows (46.9%)" in lines  # the regeneration's own words
        assert "/data" not in first["text"]  # a member's
        assert "Not started" not in first["text"]  # the extraction not reached yet: not said
        assert "30 / 64 rows" in _blocks(first)
        assert ch.edits() == []

        ch.tick()  # nothing moved: the throttle holds the edit
        assert ch.edits() == []
        fake.reply("pipeline-status", {**REGENERATE_STAGE, "current": {**REGENERATING, "done": 40}})
        ch.tick(NOW + dt.timedelta(seconds=20))
        assert ch.edits() == []  # rows moved, the phase did not: not before PROGRESS_UPDATE_S
        ch.tick(NOW + dt.timedelta(seconds=61))
        (edit,) = ch.edits()
        assert (edit["channel"], edit["ts"]) == (pin["channel"], pin["timestamp"])
        assert "regenerating — 40 / 64 rows (62.5%)" in edit["text"]

        fake.set_status(EXTRACTING)
        fake.reply("pipeline-status", EXTRACT_STAGE)
        ch.tick()  # the stage moved: edited at once
        edit = ch.edits()[-1]
        lines = edit["text"].splitlines()
        said = "pipeline running — stage 2 of 4: extract (extracting, 25,581 / 37,312 samples (68.6%))"
        assert lines[0] == said
        assert any(x.startswith("25,581 / 37,312 — 68.6% done") for x in lines)  # the extraction's own
        assert "regenerating —" not in edit["text"] and "▓" in _blocks(edit)  # the extraction's bar

        fake.set_status(EXTRACTED)
        fake.reply("pipeline-status", TRAIN_STAGE)
        ch.tick()
        edit = ch.edits()[-1]
        assert edit["text"].startswith("pipeline running — stage 3 of 4: train (training, step 60 of 120)")
        assert "training — step 60 / 120 (50.0%)" in edit["text"] and "/data" not in edit["text"]
        assert "25,581 / 37,312" not in edit["text"]

        assert len(ch.rec.named("pins.add")) == 1  # the same message throughout
        assert {(e["channel"], e["ts"]) for e in ch.edits()} == {(pin["channel"], pin["timestamp"])}
        outside = [p for p in ch.rec.named("chat.postMessage") if not p.get("thread_ts")]
        assert outside == [first]  # no second progress message
        thread = [p["text"].splitlines()[0] for p in ch.rec.named("chat.postMessage")
                  if p.get("thread_ts") == pin["timestamp"]]  # fmt: skip
        stages = [t for t in thread if t.startswith("Pipeline stage")]  # under it, as before
        assert stages == [
            f"Pipeline stage {k} of 4: {s}" for k, s in ((1, "regenerate"), (2, "extract"), (3, "train"))
        ]
        assert "60% reached" in thread  # the extraction's milestone too
        per_tick = [c[0] for c in fake.calls()]
        assert per_tick.count("pipeline") == per_tick.count("status") == 6  # no read more per tick
    finally:
        ch.close()


def test_a_lone_trainings_progress_is_pinned_and_the_message_keeps_it_once_it_ends(fake, cfg):
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))
    now = dt.datetime(2026, 12, 1, 12, 1, 30, tzinfo=dt.timezone.utc)  # 30 s after TRAINING's last step
    ch = Channel(fake, cfg)
    try:
        fake.set_status(EXTRACTED)
        fake.reply("train-status", {"phase": "stopped", "reason": "not started yet"})
        fake.reply("measure-status", {"phase": "stopped", "reason": "not started yet"})
        ch.tick(now)  # nothing runs: the extraction, as before
        first = _first_post(ch.rec)
        assert first["text"].startswith("Done: 37,312 / 37,312") and "training" not in first["text"]

        fake.reply("train-status", TRAINING)
        ch.tick()
        (edit,) = ch.edits()
        (pin,) = ch.rec.named("pins.add")
        assert edit["ts"] == pin["timestamp"]
        assert edit["text"].startswith("training — step 60 / 120 (50.0%)") and "/data" not in edit["text"]
        assert "37,312" not in edit["text"] and "50.0%* trained" in _blocks(edit)  # the training's bar

        done = {**TRAINING, "phase": "done", "step": 120, "ended_at": "2026-12-01T12:01:20.000Z"}
        fake.reply("train-status", done)
        ch.tick()
        edit = ch.edits()[-1]
        assert edit["text"].startswith("training done — step 120 / 120 (100.0%)")  # its end, kept
        ch.tick(now + dt.timedelta(seconds=61))
        assert ch.edits()[-1]["text"].startswith("training done")  # not back to the extraction
        assert len(ch.rec.named("pins.add")) == 1
    finally:
        ch.close()


def test_a_lone_measurement_or_regeneration_is_what_the_pinned_message_says(fake, cfg):
    from runner.contract.stages import RegenerateConfig

    cfg = dataclasses.replace(
        cfg,
        measure=dataclasses.replace(cfg.measure, draft="/data/draft"),
        regenerate=RegenerateConfig(input="/data/chat.jsonl"),
    )
    ch = Channel(fake, cfg)
    try:
        fake.set_status(EXTRACTED)
        fake.reply("regenerate-status", {"phase": "stopped", "reason": "not started yet"})
        fake.reply("measure-status", MEASURING_REC)
        ch.tick(dt.datetime(2026, 12, 1, 12, 8, tzinfo=dt.timezone.utc))
        first = _first_post(ch.rec)
        assert first["text"].startswith("measuring — 16 / 20 requests")
        assert "37,312" not in first["text"] and "regenerat" not in first["text"]

        fake.reply("measure-status", {**MEASURING_REC, "phase": "done", "done": 20})
        fake.reply("regenerate-status", REGENERATING)
        ch.tick()
        edit = ch.edits()[-1]
        assert edit["text"].startswith("regenerating — 30 / 64 rows (46.9%)")  # what runs now
        assert "measur" not in edit["text"]
    finally:
        ch.close()


def test_a_tick_that_could_not_read_what_the_message_shows_leaves_it_as_it_is():
    from bot.watch import pinned
    from bot.watch.watcher import Limits, WatchState
    from runner.contract.status import StatusRecord
    from runner.contract.train import TrainRecord

    done, training = StatusRecord.from_dict(EXTRACTED), TrainRecord.from_dict(TRAINING)
    read, later = ["extraction", "training"], NOW + dt.timedelta(minutes=5)

    def heads(st, seen, read=read, when=later):
        acts, st = pinned.judge(st, seen, when, Limits(), read=read)
        return [a.text.splitlines()[0][:30] for a in acts], st

    said, st = heads(WatchState(), {"extraction": done, "training": training}, when=NOW)
    assert said == ["training — step 60 / 120 (50.0"]
    assert heads(st, {"extraction": done})[0] == []  # the training unread: still shown as it was
    assert heads(st, {"training": training})[0] == []  # the box's status unread
    unwatched = heads(st, {"extraction": done}, read=["extraction"])[0]  # [train] taken out of the config
    assert unwatched == ["Done: 37,312 / 37,312 written "]
