"""The bot's real HTTP endpoint, served on loopback with its Web API pointed at a local
recording server, and a client that sends it Slack-signed requests."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from bot.slack.app import build_app
from bot.slack.http import make_http_server
from bot.verbs.audit import AuditLog

from . import slack_api

SECRET = "test-signing-secret"
OPERATOR, STRANGER = "U0OPERATOR", "U0STRANGER"
_triggers = itertools.count(1)


def new_trigger() -> str:
    """Slack gives every command and click its own trigger_id."""
    return f"{next(_triggers)}.2.3"


def command_payload(
    text: str, user: str, response_url: str, channel: str = "C0PROGRESS", team: str = "T0TEAM",
    command: str = "/extract",
) -> dict:  # fmt: skip
    """A slash command (/extract, /train) as Slack sends it."""
    return {
        "command": command,
        "text": text,
        "user_id": user,
        "channel_id": channel,
        "channel_name": "directmessage" if channel.startswith("D") else "progress",
        "team_id": team,
        "api_app_id": "A0APP",
        "response_url": response_url,
        "trigger_id": new_trigger(),
    }


def event_payload(event: dict, event_id: str, team: str = "T0TEAM") -> dict:
    return {
        "type": "event_callback",
        "team_id": team,
        "api_app_id": "A0APP",
        "event_id": event_id,
        "event_time": int(time.time()),
        "event": event,
    }


def click_payload(
    action_id: str, value: str, user: str, response_url: str, channel: str, text: str, team: str = "T0TEAM"
) -> dict:
    """A button click (block_actions) on a message the bot posted in channel."""
    return {
        "type": "block_actions",
        "user": {"id": user},
        "team": {"id": team},
        "api_app_id": "A0APP",
        "trigger_id": new_trigger(),
        "response_url": response_url,
        "channel": {"id": channel},
        "container": {"type": "message", "channel_id": channel, "message_ts": "1.1"},
        "message": {"ts": "1.1", "text": text},
        "actions": [
            {"action_id": action_id, "block_id": "b1", "type": "button", "value": value, "action_ts": "2.2"}
        ],
    }


class Listeners(ThreadPoolExecutor):
    """Bolt's listener pool, counting what it runs. Bolt hands every listener of a request
    (the ack and the lazy ones) to it before the request is answered, so once answered and
    idle, nothing more of that request will run: the proof of a "nothing happened"."""

    def __init__(self):
        super().__init__(max_workers=5)
        self._busy = 0
        self._cv = threading.Condition()

    def submit(self, fn, /, *args, **kwargs):
        with self._cv:
            self._busy += 1
        fut = super().submit(fn, *args, **kwargs)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, _fut):
        with self._cv:
            self._busy -= 1
            self._cv.notify_all()

    def idle(self, timeout: float = 60.0) -> None:
        with self._cv:
            assert self._cv.wait_for(lambda: self._busy == 0, timeout), "the bot's listeners did not end"


class Bot:
    def __init__(
        self, url: str, rec: slack_api.Recorder, api: str, fake, cfg, listeners: Listeners | None = None
    ):
        self.url, self.rec, self.api, self.fake, self.cfg = url, rec, api, fake, cfg
        self.response_url = api.replace("/api/", "/response/1")
        self.listeners = listeners

    def settled(self) -> None:
        """Every listener the requests answered so far started has ended (a bot served here)."""
        assert self.listeners is not None, "settled() needs the bot served by serve()"
        self.listeners.idle()

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

    def command_body(self, text: str, user: str = OPERATOR, **where) -> bytes:
        """A command's form body (where: channel, team), to post once or more."""
        return urllib.parse.urlencode(command_payload(text, user, self.response_url, **where)).encode()

    def command(self, text: str, user: str = OPERATOR, channel: str = "C0PROGRESS", team: str = "T0TEAM",
                command: str = "/extract", **kw) -> int:  # fmt: skip
        body = self.command_body(text, user, channel=channel, team=team, command=command)
        return self.post(body, "application/x-www-form-urlencoded", **kw)

    def event(self, event: dict, event_id: str, retry: int | None = None, team: str = "T0TEAM") -> int:
        headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"} if retry else None
        return self.post(
            json.dumps(event_payload(event, event_id, team)).encode(), "application/json", headers=headers
        )

    def click_body(self, action_id: str, value: str, user: str = OPERATOR, message_text: str = "alert",
                   channel: str = "C0ALERTS", team: str = "T0TEAM") -> bytes:  # fmt: skip
        payload = click_payload(action_id, value, user, self.response_url, channel, message_text, team)
        return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()

    def click(self, action_id: str, value: str, user: str = OPERATOR, **kw) -> int:
        return self.post(self.click_body(action_id, value, user, **kw), "application/x-www-form-urlencoded")

    def audit(self) -> list[dict]:
        return AuditLog(self.cfg.slack.audit_log).read()


@contextlib.contextmanager
def serve(cfg, box=None, fake=None):
    """The app as `hsx bot --http` runs it -> (Bot client, the app, its runtime)."""
    rec = slack_api.Recorder()
    api_server, api = slack_api.start(rec)
    env = {"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": api}
    try:
        listeners = Listeners()
        app, rt = build_app(cfg, box=box, env=env, http=True, listener_executor=listeners)
        server = make_http_server(app, 0, "127.0.0.1")
        try:
            threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
            url = f"http://127.0.0.1:{server.server_port}/slack/events"
            yield Bot(url, rec, api, fake, cfg, listeners), app, rt
        finally:
            server.shutdown()
            server.server_close()
    finally:
        api_server.shutdown()
        api_server.server_close()
