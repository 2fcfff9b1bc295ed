"""What the watcher does alike for every kind whose crash alert carries a Resume button (the
training, the measurement, the regeneration, the pipeline), once, over the kinds: the crash
posted once in the alert channel without the box's paths and by DM to the operators with them;
its button refused to a stranger and run for an operator as the kind's own resume verb (never the
extraction's), audited; and, once that run has moved on, the same button resuming nothing
(issue 47). Through the bot's signed HTTP endpoint, the recording Slack API and the fake runner;
each kind's own judging is in its own module."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys

import pytest
from slack_sdk import WebClient

from bot.verbs.table import MEASURING, PIPELINE, REGENERATING, TRAINING
from bot.watch.watcher import Watcher
from runner.contract.stages import RegenerateConfig

from ..http_bot import STRANGER, serve
from ..verbs.test_pipeline_chat import CRASHED as PIPELINE_CRASHED
from ..verbs.test_pipeline_chat import RUNNING as PIPELINE_RUNNING
from ..verbs.test_pipeline_chat import WITH_PIPELINE
from .test_measure_watch import CRASHED as MEASURE_CRASHED
from .test_regenerate_watch import CRASHED as REGENERATE_CRASHED
from .test_train_watch import CRASHED as TRAIN_CRASHED

NOW = dt.datetime(2030, 1, 1, 11, 43, tzinfo=dt.timezone.utc)


def _on(cfg, kind):
    """The bot's config with the kind watched."""
    if kind is TRAINING:
        return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))
    if kind is MEASURING:
        return dataclasses.replace(cfg, measure=dataclasses.replace(cfg.measure, draft="/data/draft"))
    if kind is REGENERATING:
        return dataclasses.replace(cfg, regenerate=RegenerateConfig(output="/data/chat.regenerated.jsonl"))
    return dataclasses.replace(cfg, pipeline=WITH_PIPELINE)


# kind: its crashed record (a reason naming a path of the box), the same run going again
CASES = {
    TRAINING: (TRAIN_CRASHED, {**TRAIN_CRASHED, "phase": "training", "launches": 2}),
    MEASURING: (MEASURE_CRASHED, {**MEASURE_CRASHED, "phase": "measuring", "pid": 5151}),
    REGENERATING: (REGENERATE_CRASHED, {**REGENERATE_CRASHED, "phase": "regenerating", "pid": 5252}),
    PIPELINE: (PIPELINE_CRASHED, {**PIPELINE_RUNNING, "pid": 7171}),
}
KINDS = list(CASES)


def _alert(bot, kind, crashed: dict) -> tuple[dict, str]:
    """The crash alert, posted once in the channel without the box's paths, and once by DM to the
    operators with what the box said; its Resume button's value."""
    head = f"{kind.name.capitalize()} CRASHED"
    posts = bot.rec.named("chat.postMessage")
    (alert,) = [p for p in posts if head in p["text"] and p["channel"] == "C0ALERTS"]
    (dm,) = [p for p in posts if head in p["text"] and p["channel"] == "U0OPERATOR"]
    assert "/data" not in alert["text"] and dm["text"] != alert["text"], (alert["text"], dm["text"])
    assert ("/data" in crashed["reason"]) == ("/data" in dm["text"]), dm["text"]
    blocks = json.loads(alert["blocks"]) if isinstance(alert["blocks"], str) else alert["blocks"]
    button = blocks[1]["elements"][0]
    assert button["action_id"] == "hsx_resume" and button["value"].startswith(kind.key), button
    return alert, button["value"]


def _tick(fake, cfg, bot, n: int) -> None:
    for _ in range(n):
        Watcher(fake.box(), cfg, WebClient(token="x", base_url=bot.api), clock=lambda: NOW).tick()


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_a_crash_is_posted_once_and_its_resume_button_runs_the_kinds_resume(kind, fake, cfg):
    cfg = _on(cfg, kind)
    crashed, _ = CASES[kind]
    action = kind.action(kind.resume)  # "train resume", "pipeline start"
    fake.reply(f"{kind.word}-status", crashed)
    fake.reply(
        f"{kind.word}-{kind.resume}", {"started": True, "pid": 79, "message": f"{kind.name} resumed (pid 79)"}
    )
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        _tick(fake, cfg, bot, 3)
        _, value = _alert(bot, kind, crashed)
        assert bot.click("hsx_resume", value, user=STRANGER) == 200
        (refusal,) = bot.rec.wait_for("response")
        assert refusal["response_type"] == "ephemeral" and f"only operators may `{action}`" in refusal["text"]
        assert bot.click("hsx_resume", value) == 200
        resumed = bot.rec.wait_for("response", 2)[1]
        assert f"{kind.name} resumed (pid 79)" in resumed["text"]
        calls = [c[-1] for c in fake.calls() if c[0] == kind.word]
        assert calls.count(kind.resume) == 1 and kind.resume not in fake.verbs()  # not the extraction's
        assert [(e["action"], e["result"][:7]) for e in bot.audit()] == [
            (action, "refused"),
            (action, "attempt"),
            (action, "ok"),
        ]


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_a_resume_button_whose_run_has_moved_on_resumes_nothing(kind, fake, cfg):
    """Clicked after the run was resumed by hand (it runs again, in a later launch): the click says
    the alert no longer stands and runs nothing, audits nothing."""
    cfg = _on(cfg, kind)
    crashed, going = CASES[kind]
    fake.reply(f"{kind.word}-status", crashed)
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        _tick(fake, cfg, bot, 1)
        _, value = _alert(bot, kind, crashed)
        fake.reply(f"{kind.word}-status", going)
        assert bot.click("hsx_resume", value) == 200
        (gone,) = bot.rec.wait_for("response")
        assert gone["response_type"] == "ephemeral" and "this alert no longer stands" in gone["text"], gone
        assert kind.resume not in [c[-1] for c in fake.calls() if c[0] == kind.word] and bot.audit() == []
