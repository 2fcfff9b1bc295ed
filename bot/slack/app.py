"""Wiring only: secrets from the environment, the bolt app, listeners, watcher, server."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

from slack_bolt import App, BoltResponse
from slack_sdk import WebClient

from bot.slack import listeners
from bot.slack.runtime import Runtime
from bot.slack.seen import SeenIds
from bot.verbs.access import served
from bot.watch.history import state_path
from bot.wiring import make_handlers, open_box
from runner.contract.config import Config
from runner.contract.errors import ConfigError

log = logging.getLogger("hsx.bot")
GROUP_CACHE_S = 300.0


def require_env(env: Mapping[str, str], name: str, why: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is not set in the environment ({why}); secrets never go in hsx.toml")
    return value


def _cached_members(fetch):
    """user -> bool over a member list fetched at most every GROUP_CACHE_S."""
    cache: dict[str, object] = {"at": -GROUP_CACHE_S, "members": set()}

    def has(user: str) -> bool:
        if time.monotonic() - float(cache["at"]) > GROUP_CACHE_S:
            cache["members"] = fetch()
            cache["at"] = time.monotonic()
        return user in cache["members"]

    return has


def _group_checker(client: WebClient, group: str):
    return _cached_members(lambda: set(client.usergroups_users_list(usergroup=group).get("users") or []))


def _channel_members(client: WebClient, channels: list[str]) -> set[str]:
    members: set[str] = set()
    for channel in channels:
        for page in client.conversations_members(channel=channel, limit=1000):
            members.update(page.get("members") or [])
    return members


def _team_of(body: dict) -> str:
    """The workspace a request comes from: commands and events name it, clicks nest it."""
    team, nested, user = body.get("team_id"), body.get("team"), body.get("user")
    if not team and isinstance(nested, dict):
        team = nested.get("id")
    if not team and isinstance(user, dict):
        team = user.get("team_id")
    return str(team or "")


def build_app(
    cfg: Config, box=None, env: Mapping[str, str] = os.environ, http: bool = False, listener_executor=None
) -> tuple[App, Runtime]:
    """The app and its runtime. ``listener_executor`` runs every listener a request starts (Bolt's
    own pool where None): the tests' tells when all of them have ended."""
    token = require_env(env, "SLACK_BOT_TOKEN", "the bot's xoxb- token")
    secret = (
        require_env(env, "SLACK_SIGNING_SECRET", "HTTP mode verifies request signatures") if http else None
    )
    client = WebClient(token=token, base_url=env.get("SLACK_API_URL") or WebClient.BASE_URL)
    app = App(
        client=client,
        signing_secret=secret,
        request_verification_enabled=http,
        process_before_response=False,
        listener_executor=listener_executor,
    )
    in_group = _group_checker(client, cfg.slack.operator_group) if cfg.slack.operator_group else None
    rt = Runtime(
        cfg=cfg,
        handlers=make_handlers(cfg, box if box is not None else open_box(cfg), in_group=in_group),
        events=SeenIds(state_path(cfg, ".events.json")),
        buttons=SeenIds(state_path(cfg, ".buttons.json")),
        is_member=_cached_members(lambda: _channel_members(client, served(cfg))),
    )

    @app.middleware
    def ours_and_once(body, next):
        if not isinstance(body, dict):
            return next()
        team = _team_of(body)
        if cfg.slack.team_id and team != cfg.slack.team_id:
            log.warning(
                "request from workspace %s refused: [slack] team_id is %s", team or "?", cfg.slack.team_id
            )
            return BoltResponse(status=200, body="hsx answers only in its own Slack workspace")
        # A retried event (X-Slack-Retry-Num) carries the same event_id; a command or click
        # replayed within the signature's 5 minutes, the same trigger_id: act on each once.
        key = str(body.get("event_id") or "")  # bare, as the ids already stored are
        key = key or (f"trigger:{body['trigger_id']}" if body.get("trigger_id") else "")
        if key and not rt.events.claim(key):
            log.info("%s seen before: not acted on again", key)
            return BoltResponse(status=200, body="")
        return next()

    @app.error
    def on_error(error, body):
        log.exception("listener failed (%s)", (body or {}).get("type", "?"), exc_info=error)

    listeners.register(app, rt)
    return app, rt


def run_bot(
    cfg: Config,
    http_port: int | None = None,
    env: Mapping[str, str] = os.environ,
    http_host: str = "127.0.0.1",
) -> None:
    """`hsx bot`: Socket Mode by default, HTTP on http_host:http_port. Blocks until interrupted."""
    from bot.watch.watcher import start_watcher

    app_token = (
        None if http_port else require_env(env, "SLACK_APP_TOKEN", "Socket Mode needs the xapp- token")
    )
    app, rt = build_app(cfg, env=env, http=http_port is not None)
    scheduler = start_watcher(rt.handlers.box, cfg, app.client, live=rt.handlers.live)
    try:
        if http_port is not None:
            from bot.slack.http import make_http_server

            server = make_http_server(app, http_port, http_host)
            log.info("hsx bot listening on %s:%d/slack/events", http_host, server.server_port)
            server.serve_forever()
        else:
            from slack_bolt.adapter.socket_mode import SocketModeHandler

            SocketModeHandler(app, app_token).start()
    finally:
        scheduler.shutdown(wait=False)
