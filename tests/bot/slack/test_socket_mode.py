"""The bot in Socket Mode, started as `hsx bot` starts it, against a local Socket Mode endpoint.

One `hsx bot` process serves the whole module (starting it costs about a second). It asks the
recording Web API server for a connection (apps.connections.open, xapp- token), opens the
ws:// URL it is given, and gets envelopes through it; what it does shows up as acks on the
socket, Web API calls on the recording server and runner calls on the fixture GPU box.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from bot.verbs.audit import AuditLog
from tests.runner.helpers import wait_for

from .. import slack_api
from ..conftest import EXTRACTING, FakeBox
from ..http_bot import click_payload, command_payload, event_payload
from ..socket_server import SocketModeServer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OPERATOR, STRANGER = "U0OPERATOR", "U0STRANGER"
APP_TOKEN = "xapp-1-A0APP-test"

CONFIG = """\
[remote]
transport = "local"
runner = "{runner}"
runner_config = "{runner_config}"

[slack]
channels = ["C0PROGRESS"]
alert_channel = "C0ALERTS"
operators = ["{operator}"]
audit_log = "{audit}"

[watcher]
interval_s = 3600  # one tick at start-up, none while the tests run
milestone_pct = 10
state_file = "{state}"
"""


class SocketBot:
    def __init__(self, proc, log_path, rec, api, ws, fake, audit_path):
        self.proc, self.log_path, self.rec, self.ws, self.fake = proc, log_path, rec, ws, fake
        self.response_url = api.replace("/api/", "/response/1")
        self.audit_log = AuditLog(audit_path)
        self.opened: list[dict] = []  # apps.connections.open calls made at start-up

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]

    def command(self, text: str, user: str) -> str:
        payload = command_payload(text, user, self.response_url)
        return self.ws.send_envelope("slash_commands", payload, accepts_response_payload=True)

    def event(self, event: dict, event_id: str, retry: int = 0) -> str:
        extra = {"retry_attempt": retry, "retry_reason": "timeout" if retry else ""}
        return self.ws.send_envelope("events_api", event_payload(event, event_id), **extra)

    def click(self, action_id: str, value: str, user: str) -> str:
        payload = click_payload(
            action_id, value, user, self.response_url, "C0PROGRESS", "Stop the extraction?"
        )
        return self.ws.send_envelope("interactive", payload)

    def acked(self, envelope_id: str) -> dict:
        try:
            return self.ws.wait_ack(envelope_id)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- bot log ---\n{self.log()}") from None

    def audit(self) -> list[dict]:
        return self.audit_log.read()


@pytest.fixture(scope="module")
def socket_bot(tmp_path_factory):
    threads_before = set(threading.enumerate())
    tmp = tmp_path_factory.mktemp("socket_mode")
    (tmp / "gpu").mkdir()
    fake = FakeBox(str(tmp / "gpu"))
    paths = {"audit": str(tmp / "ops" / "audit.jsonl"), "state": str(tmp / "ops" / "watch.json")}
    conf = tmp / "hsx.toml"
    conf.write_text(CONFIG.format(runner=fake.runner, runner_config=fake.config, operator=OPERATOR, **paths))
    rec = slack_api.Recorder()
    api_server, api = slack_api.start(rec)
    ws = SocketModeServer()
    rec.socket_url = ws.url
    # A bare environment: no proxy variables for the socket client to pick up, secrets only here.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "PYTHONPATH": REPO,
        "SLACK_APP_TOKEN": APP_TOKEN,
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_API_URL": api,
    }
    log_path = tmp / "bot.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "bot", "--config", str(conf)],
            env=env,
            cwd=str(tmp),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    bot = SocketBot(proc, str(log_path), rec, api, ws, fake, paths["audit"])
    try:
        wait_for(
            lambda: ws.conn is not None or proc.poll() is not None, 20, what="the Socket Mode connection"
        )
        assert proc.poll() is None, f"hsx bot exited with {proc.returncode}:\n{bot.log()}"
        # The watcher's start-up tick posts and pins a progress message; let it finish first.
        wait_for(lambda: os.path.exists(paths["state"]), 10, what="the watcher's first tick")
        bot.opened = rec.named("apps.connections.open")
        yield bot
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C, as an operator stops it
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        ws.close()
        api_server.shutdown()
        api_server.server_close()
    assert proc.returncode in (-signal.SIGINT, 130), f"hsx bot ignored Ctrl-C:\n{bot.log()}"
    assert ws.errors == [], ws.errors
    wait_for(lambda: set(threading.enumerate()) <= threads_before, 5, what="the test's threads to end")


@pytest.fixture
def bot(socket_bot):
    """The shared bot with a clean slate: no recorded calls, runner calls or audit entries."""
    b = socket_bot
    with b.rec.lock:
        b.rec.calls.clear()
    argv = os.path.join(b.fake.folder, "argv.jsonl")
    if os.path.exists(argv):
        os.remove(argv)
    b.fake.set_status(EXTRACTING)
    if os.path.exists(b.audit_log.path):
        os.remove(b.audit_log.path)
    yield b
    assert b.proc.poll() is None, f"hsx bot died:\n{b.log()}"
    assert b.ws.errors == [], b.ws.errors


def test_connects_with_the_app_token_to_the_url_it_was_given(bot):
    (opened,) = bot.opened
    assert opened["_auth"] == f"Bearer {APP_TOKEN}"
    assert bot.ws.requests == ["GET /link/?ticket=test HTTP/1.1"]
    wait_for(lambda: bot.ws.pings >= 1, 5, what="the client's first ping")  # answered with a pong


def test_status_command_is_acked_then_answered_with_the_summary(bot):
    envelope = bot.command("status", user=STRANGER)  # read-only: any channel member
    assert bot.acked(envelope) == {"envelope_id": envelope}
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "in_channel"
    assert resp["text"].startswith(
        "25,581 / 37,312 — 68.6% done\n0 errors since resume · 1.16 samples/s steady"
    )
    assert bot.fake.verbs() == ["status"]


def test_progress_question_is_answered_once_even_when_the_envelope_is_retried(bot):
    event = {"type": "message", "channel": "C0PROGRESS", "user": STRANGER, "text": "progress?", "ts": "1.5"}
    bot.acked(bot.event(event, "EvSock0001"))
    (post,) = bot.rec.wait_for("chat.postMessage")
    assert post["channel"] == "C0PROGRESS"
    assert post["text"].startswith("25,581 / 37,312 — 68.6% done")
    assert len(post["text"].splitlines()) <= 4  # the terse summary, not a report

    retried = bot.event(event, "EvSock0001", retry=1)
    assert bot.acked(retried) == {"envelope_id": retried}  # acked, so Slack stops retrying
    # dropped before any listener: the bot says so, then acks (its middleware answers the envelope)
    assert "EvSock0001 seen before: not acted on again" in bot.log()
    elsewhere = {**event, "channel": "C0ELSEWHERE", "ts": "1.6"}
    bot.acked(bot.event(elsewhere, "EvSock0002"))
    bot.acked(bot.event({**event, "text": "Status??", "ts": "1.7"}, "EvSock0003"))
    posts = bot.rec.wait_for("chat.postMessage", 2)
    assert len(bot.rec.named("chat.postMessage")) == 2
    assert [p["channel"] for p in posts] == ["C0PROGRESS", "C0PROGRESS"]
    assert bot.fake.verbs() == ["status", "status"]


def test_stranger_stop_is_refused_and_changes_nothing(bot):
    envelope = bot.command("stop", user=STRANGER)
    assert bot.acked(envelope) == {"envelope_id": envelope}
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral" and resp["text"].startswith("refused")
    # A forged click on the confirm button is refused the same way.
    bot.acked(bot.click("hsx_stop_confirm", "stop", user=STRANGER))
    resp = bot.rec.wait_for("response", 2)[1]
    assert resp["response_type"] == "ephemeral" and resp["text"].startswith("refused")
    assert bot.fake.calls() == []  # refused before the box is asked, by the listener that answered
    assert [(e["user"], e["action"], e["result"]) for e in bot.audit()] == [
        (STRANGER, "stop", "refused: not an operator")
    ] * 2


def test_operator_stop_confirmed_through_the_socket_stops_once(bot):
    bot.acked(bot.command("stop", user=OPERATOR))
    (ask,) = bot.rec.wait_for("response")
    button = ask["blocks"][1]["elements"][0]
    assert button["action_id"] == "hsx_confirm" and bot.fake.calls() == []
    bot.acked(bot.click("hsx_confirm", button["value"], user=OPERATOR))
    posts = bot.rec.wait_for("response", 3)
    assert posts[1].get("delete_original") is True
    assert posts[2]["response_type"] == "in_channel" and "stop accepted" in posts[2]["text"]
    assert bot.fake.verbs() == ["stop"]
    assert [(e["user"], e["action"], e["result"]) for e in bot.audit()] == [
        (OPERATOR, "stop", "attempt"),
        (OPERATOR, "stop", "ok"),
    ]
