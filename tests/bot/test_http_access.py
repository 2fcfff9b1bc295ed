"""Who may ask what, from where, how often, and once: through the bot's signed HTTP endpoint."""

from __future__ import annotations

import os
import time

import pytest

from .http_bot import STRANGER, serve


@pytest.fixture
def bot(fake, cfg):
    with serve(cfg, box=fake.box(), fake=fake) as (client, _, _):
        yield client


def test_another_workspace_is_refused_when_team_id_is_set(fake, cfg):
    cfg.slack.team_id = "T0TEAM"
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        assert bot.command("status", team="T0OTHER") == 200
        assert bot.click("hsx_confirm", "stop", team="T0OTHER") == 200
        progress = {
            "type": "message",
            "channel": "C0PROGRESS",
            "user": STRANGER,
            "text": "progress?",
            "ts": "1",
        }
        assert bot.event(progress, "Ev0100", team="T0OTHER") == 200
        time.sleep(0.5)
        assert bot.fake.calls() == [] and bot.rec.named("chat.postMessage") == []
        assert bot.rec.named("response") == [] and bot.audit() == []
        bot.command("status")  # its own workspace is answered
        (resp,) = bot.rec.wait_for("response")
        assert resp["text"].startswith("25,581 / 37,312")


def test_a_replayed_command_runs_once_with_one_audit_record(bot):
    body = bot.command_body("resume --force")
    ts = int(time.time())
    ctype = "application/x-www-form-urlencoded"
    assert bot.post(body, ctype, ts=ts) == 200
    bot.rec.wait_for("response")
    assert bot.post(body, ctype, ts=ts) == 200  # the same signed bytes, inside the 5-minute window
    time.sleep(0.5)
    assert len(bot.rec.named("response")) == 1 and bot.fake.verbs() == ["resume"]
    assert [e["result"] for e in bot.audit()] == ["attempt", "ok"]


def test_a_replayed_click_acts_once(bot):
    body = bot.click_body("hsx_confirm", "stop")
    ts = int(time.time())
    for _ in range(2):
        assert bot.post(body, "application/x-www-form-urlencoded", ts=ts) == 200
    bot.rec.wait_for("response", 2)  # delete the ask, post the result
    time.sleep(0.5)
    assert bot.fake.verbs() == ["stop"] and len(bot.rec.named("response")) == 2


def test_the_attempt_is_on_record_before_the_action_ends(bot):
    with open(os.path.join(bot.fake.folder, "resume.sleep"), "w") as f:
        f.write("2")
    bot.command("resume")
    deadline = time.monotonic() + 10
    while "resume" not in bot.fake.verbs() and time.monotonic() < deadline:
        time.sleep(0.05)
    during = [(e["action"], e["result"]) for e in bot.audit()]
    assert during[:1] == [("resume", "attempt")], during  # the runner is still working on it
    bot.rec.wait_for("response")
    attempt, outcome = bot.audit()
    assert outcome["result"] == "ok" and attempt["id"] == outcome["id"]
