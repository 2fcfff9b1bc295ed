"""The bot over real HTTP: signed requests in, Web API calls out to a recording server."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from bot.app import build_app, run_bot
from bot.audit import AuditLog
from bot.http import make_http_server
from runner.errors import ConfigError

from . import slack_api

SECRET = "test-signing-secret"
OPERATOR, STRANGER = "U0OPERATOR", "U0STRANGER"


class Bot:
    def __init__(self, url: str, rec: slack_api.Recorder, api: str, fake, cfg):
        self.url, self.rec, self.api, self.fake, self.cfg = url, rec, api, fake, cfg
        self.response_url = api.replace("/api/", "/response/1")

    def post(self, body: bytes, ctype: str, ts: int | None = None, secret: str = SECRET, headers=None) -> int:
        ts = int(time.time()) if ts is None else ts
        sig = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
        h = {"Content-Type": ctype, "X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": sig}
        h.update(headers or {})
        req = urllib.request.Request(self.url, data=body, headers=h, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def command(self, text: str, user: str = OPERATOR, **kw) -> int:
        form = {
            "command": "/extract",
            "text": text,
            "user_id": user,
            "channel_id": "C0PROGRESS",
            "team_id": "T0TEAM",
            "response_url": self.response_url,
            "trigger_id": "1.2.3",
        }
        return self.post(urllib.parse.urlencode(form).encode(), "application/x-www-form-urlencoded", **kw)

    def event(self, event: dict, event_id: str, retry: int | None = None) -> int:
        body = {
            "type": "event_callback",
            "team_id": "T0TEAM",
            "api_app_id": "A0APP",
            "event_id": event_id,
            "event_time": int(time.time()),
            "event": event,
        }
        headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"} if retry else None
        return self.post(json.dumps(body).encode(), "application/json", headers=headers)

    def click(self, action_id: str, value: str, user: str = OPERATOR, message_text: str = "alert") -> int:
        payload = {
            "type": "block_actions",
            "user": {"id": user},
            "team": {"id": "T0TEAM"},
            "api_app_id": "A0APP",
            "trigger_id": "1.2.3",
            "response_url": self.response_url,
            "channel": {"id": "C0ALERTS"},
            "container": {"type": "message", "channel_id": "C0ALERTS", "message_ts": "1.1"},
            "message": {"ts": "1.1", "text": message_text},
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": "b1",
                    "type": "button",
                    "value": value,
                    "action_ts": "2.2",
                }
            ],
        }
        form = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
        return self.post(form, "application/x-www-form-urlencoded")

    def audit(self) -> list[dict]:
        return AuditLog(self.cfg.slack.audit_log).read()


@pytest.fixture
def bot(fake, cfg):
    rec = slack_api.Recorder()
    api_server, api = slack_api.start(rec)
    env = {"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": api}
    app, _ = build_app(cfg, box=fake.box(), env=env, http=True)
    server = make_http_server(app, 0, "127.0.0.1")
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield Bot(f"http://127.0.0.1:{server.server_port}/slack/events", rec, api, fake, cfg)
    server.shutdown()
    server.server_close()
    api_server.shutdown()
    api_server.server_close()


def test_status_command_answers_with_the_summary_in_channel(bot):
    assert bot.command("status") == 200
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "in_channel"
    assert resp["text"].startswith(
        "25,581 / 37,312 — 68.6% done\n0 errors since resume · 1.16 samples/s steady"
    )
    assert any(b["type"] == "context" and "gpu-1" in b["elements"][0]["text"] for b in resp["blocks"])
    assert bot.fake.verbs() == ["status"]


def test_bad_signature_is_401_and_runs_nothing(bot):
    assert bot.command("resume", secret="wrong-secret") == 401
    time.sleep(0.3)
    assert bot.fake.calls() == [] and bot.rec.named("response") == []


def test_old_timestamp_is_refused(bot):
    assert bot.command("resume", ts=int(time.time()) - 6 * 60) == 401
    time.sleep(0.3)
    assert bot.fake.calls() == []


def test_stranger_resume_is_refused_and_audited(bot):
    assert bot.command("resume", user=STRANGER) == 200
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral" and "refused" in resp["text"]
    assert bot.fake.calls() == []
    (entry,) = bot.audit()
    assert entry["user"] == STRANGER and entry["action"] == "resume" and entry["result"].startswith("refused")


def test_operator_resume_runs_the_fixed_verb_once_and_audits(bot):
    assert bot.command("resume") == 200
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "in_channel"
    assert "resume accepted" in resp["text"] and f"audit: <@{OPERATOR}> `resume` → ok" in resp["text"]
    assert bot.fake.calls() == [["resume", "--json", "--config", bot.fake.config]]
    assert [e["result"] for e in bot.audit()] == ["ok"]


@pytest.mark.parametrize(
    "text",
    [
        "resume; rm -rf /",
        "$(id)",
        "status `id`",
        "resume\nrm -rf /",
        "x" * 10_000,
        "frobnicate",
        "logs 99999",
    ],
)
def test_hostile_or_unknown_input_gets_help_and_runs_nothing(bot, text):
    assert bot.command(text) == 200
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral"
    assert "/extract status" in resp["text"]  # the help text
    assert bot.fake.calls() == [] and bot.audit() == []


def test_stop_asks_for_confirmation_then_stops_once(bot):
    bot.command("stop")
    (ask,) = bot.rec.wait_for("response")
    assert bot.fake.calls() == []
    button = ask["blocks"][1]["elements"][0]
    assert button["action_id"] == "hsx_stop_confirm"
    assert bot.click("hsx_stop_confirm", button["value"]) == 200
    posts = bot.rec.wait_for("response", 3)
    assert posts[1].get("delete_original") is True
    assert posts[2]["response_type"] == "in_channel" and "`stop`" in posts[2]["text"]
    assert bot.fake.verbs() == ["stop"]
    assert [(e["action"], e["result"]) for e in bot.audit()] == [("stop", "ok")]


def test_progress_message_answered_once_even_when_slack_retries(bot):
    event = {"type": "message", "channel": "C0PROGRESS", "user": STRANGER, "text": "Progress?", "ts": "1.5"}
    assert bot.event(event, "Ev0001") == 200
    assert bot.event(event, "Ev0001", retry=1) == 200
    (post,) = bot.rec.wait_for("chat.postMessage")
    time.sleep(0.3)
    assert len(bot.rec.named("chat.postMessage")) == 1
    assert post["channel"] == "C0PROGRESS" and post["text"].startswith("25,581 / 37,312")
    assert bot.fake.verbs() == ["status"]


def test_progress_in_an_unwatched_channel_is_ignored(bot):
    event = {"type": "message", "channel": "C0ELSEWHERE", "user": STRANGER, "text": "progress?", "ts": "1.6"}
    assert bot.event(event, "Ev0002") == 200
    time.sleep(0.4)
    assert bot.rec.named("chat.postMessage") == [] and bot.fake.calls() == []


def test_corrupt_status_record_is_an_ephemeral_error(bot):
    bot.fake.reply("status", '{"phase": "exploding", "total": 3')
    bot.command("status")
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral" and "unreadable" in resp["text"]


def test_unreachable_box_is_reported_with_the_hop(bot, tmp_path):
    os.remove(bot.fake.runner)  # LocalTransport cannot start it: the "local" hop is down
    bot.command("status")
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral"
    assert "GPU box unreachable — hop: local" in resp["text"]


def test_chart_uploads_a_png(bot):
    from bot import history
    from runner.status import StatusRecord

    for t, done in (("2030-01-01T10:00:00Z", 100), ("2030-01-01T11:00:00Z", 4300)):
        history.append(bot.cfg, StatusRecord(heartbeat_at=t, done=done, rate=1.16))
    bot.command("chart")
    (upload,) = bot.rec.wait_for("upload")
    (done,) = bot.rec.wait_for("files.completeUploadExternal")
    assert upload["_head"].startswith(b"\x89PNG") and upload["_bytes"] > 1000
    assert done["channel_id"] == "C0PROGRESS" and "100 → 4,300" in done["initial_comment"]


def test_missing_secrets_are_a_clear_startup_error(cfg, fake):
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN"):
        build_app(cfg, box=fake.box(), env={}, http=True)
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        build_app(cfg, box=fake.box(), env={"SLACK_BOT_TOKEN": "xoxb-x"}, http=True)
    with pytest.raises(ConfigError, match="SLACK_APP_TOKEN"):
        run_bot(cfg, None, env={"SLACK_BOT_TOKEN": "xoxb-x"})
