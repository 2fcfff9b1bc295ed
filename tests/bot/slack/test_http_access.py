"""Who may ask what, from where, how often, and once: through the bot's signed HTTP endpoint."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.runner.helpers import wait_for

from ..http_bot import OPERATOR, STRANGER, serve


@pytest.fixture
def bot(fake, cfg):
    with serve(cfg, box=fake.box(), fake=fake) as (client, _, _):
        yield client


def _refusal(bot, count: int = 1) -> dict:
    resp = bot.rec.wait_for("response", count)[count - 1]
    assert resp["response_type"] == "ephemeral", resp
    return resp


@pytest.mark.parametrize("text", ["logs --server", "verify", "preflight", "status", "resume --force"])
def test_commands_from_an_unwatched_channel_run_nothing(bot, text):
    for user in (STRANGER, OPERATOR):  # the place is refused, whoever asks
        assert bot.command(text, user=user, channel="C0ELSEWHERE") == 200
    for n in (1, 2):
        assert "only in <#C0PROGRESS>" in _refusal(bot, n)["text"]
    bot.settled()
    assert bot.fake.calls() == [] and bot.audit() == []


def test_commands_in_a_direct_message_need_a_member_of_a_watched_channel(bot):
    bot.rec.members["C0PROGRESS"] = [STRANGER]
    assert bot.command("verify", user="U0OUTSIDER", channel="D0DM") == 200
    assert "direct messages" in _refusal(bot)["text"]
    assert bot.fake.calls() == []
    bot.command("status", user=STRANGER, channel="D0DM")
    resp = bot.rec.wait_for("response", 2)[1]
    assert resp["text"].startswith("25,581 / 37,312") and bot.fake.verbs() == ["status"]


def test_help_and_status_stay_open_to_members_in_a_watched_channel(bot):
    bot.command("help", user=STRANGER)
    bot.command("status", user=STRANGER)
    help_, status = sorted(bot.rec.wait_for("response", 2), key=lambda r: "/extract status" not in r["text"])
    assert "/extract status" in help_["text"] and status["text"].startswith("25,581 / 37,312")


def test_logs_are_for_operators(bot):
    bot.command("logs --server", user=STRANGER)
    assert "refused: only operators may `logs`" in _refusal(bot)["text"]
    assert bot.fake.calls() == []
    assert [(e["user"], e["action"], e["result"]) for e in bot.audit()] == [
        (STRANGER, "logs", "refused: not an operator")
    ]
    bot.command("logs 3 --server")
    lines = bot.rec.wait_for("response", 2)[1]
    assert "last 3 server log lines" in lines["text"] and bot.fake.verbs() == ["logs"]


def test_a_click_from_an_unwatched_channel_stops_nothing(bot):
    assert bot.click("hsx_confirm", "stop", channel="C0ELSEWHERE") == 200
    assert "only in <#C0PROGRESS>" in _refusal(bot)["text"]
    bot.settled()
    assert bot.fake.calls() == [] and bot.audit() == []


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
        bot.settled()
        assert bot.fake.calls() == [] and bot.rec.named("chat.postMessage") == []
        assert bot.rec.named("response") == [] and bot.audit() == []
        bot.command("status")  # its own workspace is answered
        (resp,) = bot.rec.wait_for("response")
        assert resp["text"].startswith("25,581 / 37,312")


def test_the_expensive_reads_are_rate_limited_per_user_with_a_clear_answer(bot):
    bot.fake.reply("verify", {"ok": True, "background": True, "started": True, "pid": 7})
    bot.command("verify", user=STRANGER)
    bot.rec.wait_for("response")
    bot.command("verify", user=STRANGER)
    limited = _refusal(bot, 2)["text"]
    assert limited.startswith("`verify` is limited to once every 10m per person: again in "), limited
    bot.command("preflight", user=STRANGER)  # each verb has its own allowance
    bot.rec.wait_for("response", 3)
    bot.command("verify")  # operators are not limited
    bot.command("verify")
    bot.rec.wait_for("response", 5)
    assert bot.fake.verbs() == ["verify", "preflight", "verify", "verify"]


def test_a_replayed_command_runs_once_with_one_audit_record(bot):
    body = bot.command_body("resume --force")
    ts = int(time.time())
    ctype = "application/x-www-form-urlencoded"
    assert bot.post(body, ctype, ts=ts) == 200
    bot.rec.wait_for("response")
    assert bot.post(body, ctype, ts=ts) == 200  # the same signed bytes, inside the 5-minute window
    bot.settled()
    assert len(bot.rec.named("response")) == 1 and bot.fake.verbs() == ["resume"]
    assert [e["result"] for e in bot.audit()] == ["attempt", "ok"]


def test_a_replayed_click_acts_once(bot):
    body = bot.click_body("hsx_confirm", "stop")
    ts = int(time.time())
    for _ in range(2):
        assert bot.post(body, "application/x-www-form-urlencoded", ts=ts) == 200
    bot.rec.wait_for("response", 2)  # delete the ask, post the result
    bot.settled()
    assert bot.fake.verbs() == ["stop"] and len(bot.rec.named("response")) == 2


HOSTILE = "<!channel> & <@U1>"
ESCAPED = "&lt;!channel&gt; &amp; &lt;@U1&gt;"


def _no_markup(obj) -> None:
    """No text in a Slack payload carries the box's words as markup."""
    text = json.dumps(obj)
    assert "<!channel>" not in text and "<@U1>" not in text, text


def test_text_from_the_box_reaches_slack_escaped(bot):
    bot.fake.set_status(phase="paused", reason=HOSTILE)
    bot.command("status", user=STRANGER)
    (resp,) = bot.rec.wait_for("response")
    assert ESCAPED in resp["text"] and any(ESCAPED in json.dumps(b) for b in resp["blocks"])
    _no_markup(resp)
    event = {"type": "message", "channel": "C0PROGRESS", "user": STRANGER, "text": "progress?", "ts": "1"}
    bot.event(event, "Ev0200")
    (post,) = bot.rec.wait_for("chat.postMessage")
    assert ESCAPED in post["text"]
    _no_markup(post)


def test_a_watcher_alert_escapes_the_box_text(fake, cfg):
    from slack_sdk import WebClient

    from bot.watch.watcher import Watcher

    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        fake.set_status(phase="paused", reason=HOSTILE)
        Watcher(fake.box(), cfg, WebClient(token="x", base_url=bot.api)).tick()
        posts = bot.rec.named("chat.postMessage") + bot.rec.named("chat.update")
        (alert,) = [p for p in posts if "PAUSED" in p["text"]]
        assert ESCAPED in alert["text"] and ESCAPED in json.dumps(alert["blocks"])
        for p in posts:
            _no_markup(p)


def test_the_attempt_is_on_record_before_the_action_ends(bot):
    with open(os.path.join(bot.fake.folder, "resume.sleep"), "w") as f:
        f.write("2")
    bot.command("resume")
    wait_for(lambda: "resume" in bot.fake.verbs(), 10, what="the runner's resume")
    during = [(e["action"], e["result"]) for e in bot.audit()]
    assert during[:1] == [("resume", "attempt")], during  # the runner is still working on it
    bot.rec.wait_for("response")
    attempt, outcome = bot.audit()
    assert outcome["result"] == "ok" and attempt["id"] == outcome["id"]


def test_a_failed_action_escapes_the_box_text_and_keeps_the_audit_mention(bot):
    bot.fake.reply("resume", HOSTILE, code=2)  # not JSON: the runner's words, as they came
    bot.command("resume")
    (resp,) = bot.rec.wait_for("response")
    assert ESCAPED in resp["text"] and f"audit: <@{OPERATOR}> `resume` → error" in resp["text"], resp
    _no_markup(resp)
