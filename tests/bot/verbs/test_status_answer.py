"""A status answer within seconds whatever the GPU box does, over a real jump host and target
sshd (tests/sshd.py) whose `hsx-runner` is the fake runner, asked through the bot's real HTTP
endpoint ("progress?", `/extract status`) and the `hsx status` command.

The old code answered after ~60 s (box hung), ~10 s (the held session hung) and ~9 s (box
refusing), the first and last with no counts at all."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from slack_sdk import WebClient

from bot.watch.watcher import start_watcher
from remote.connect import open_box
from runner.contract import timing
from runner.contract.config import load
from tests.conftest import ROOT, write_config
from tests.runner.helpers import wait_for
from tests.ticks import Ticks

from ..http_bot import STRANGER, serve

PROMISE_S = 5.0  # what the README promises
SLACK_S = 2.5  # 2 slow cores
LAST = "25,581 / 37,312 — 68.6% done"  # the fixture record's counts


def bot_config(path, pair, fake, ops, **watcher) -> str:
    sections = {
        "remote": {
            "transport": "ssh", "host": pair.target.addr, "port": pair.target.port, "user": pair.user,
            "jump": pair.jump_spec, "identity_file": pair.client_key, "known_hosts": pair.known_hosts,
            "runner": fake.runner, "runner_config": fake.config, "command_timeout_s": 30.0,
        },  # connect_timeout_s stays at its default (10 s): a hung box's handshake waits that long
        "slack": {"channels": ["C0PROGRESS"], "alert_channel": "C0ALERTS", "operators": ["U0OPERATOR"],
                  "audit_log": os.path.join(ops, "audit.jsonl")},
        "watcher": {"state_file": os.path.join(ops, "watch.json"), "interval_s": 0.5, **watcher},
    }  # fmt: skip
    return write_config(path, **sections)


class World:
    def __init__(self, pair, fake, tmp_path, **watcher):
        self.pair, self.fake = pair, fake
        self.conf = bot_config(tmp_path / "hsx.toml", pair, fake, str(tmp_path / "ops"), **watcher)
        self.cfg = load(self.conf)
        self.box = open_box(self.cfg)
        self.asked = 0

    def progress(self, bot) -> tuple[str, float]:
        """Ask "progress?" over the bot's HTTP endpoint: (the answer, seconds it took)."""
        self.asked += 1
        n = self.asked
        start = time.monotonic()
        event = {
            "type": "message",
            "channel": "C0PROGRESS",
            "user": STRANGER,
            "text": "progress?",
            "ts": f"1.{n}",
        }
        assert bot.event(event, f"Ev{n:04d}") == 200
        posts = bot.rec.wait_for("chat.postMessage", n, timeout=120)
        return posts[n - 1]["text"], time.monotonic() - start

    def first_true(self, bot) -> str:
        """Ask until the true status comes through both hops: on a busy machine the first
        connection (two handshakes, the runner's start) may take longer than the answer bound,
        and then the bot rightly says so; what the tests below judge comes after."""

        def true_status():
            text = self.progress(bot)[0]
            assert text.startswith(LAST) or "not answering since" in text, text  # slow, never wrong
            return text if text.startswith(LAST) else None

        return wait_for(true_status, 60, every=0, what="the true status through both hops")

    def cli_status(self) -> tuple[subprocess.CompletedProcess, float]:
        """`hsx status` in a new process: (its result, seconds past the process's own start-up).
        The start-up (an interpreter importing the bot and paramiko) is measured here, just
        before, as this machine and its load make it; the promise is what comes after."""
        env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        run = lambda argv: subprocess.run(  # noqa: E731
            [sys.executable, *argv], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
        )
        start = time.monotonic()
        assert run(["-c", "import bot.cli, remote.connect, remote.ssh"]).returncode == 0
        started = time.monotonic() - start
        start = time.monotonic()
        p = run(["-m", "bot.cli", "status", "--config", self.conf])
        return p, time.monotonic() - start - started


@pytest.fixture
def world(pair, fake, tmp_path):
    w = World(pair, fake, tmp_path)
    yield w
    w.box.close()


def assert_last_seen(text: str) -> None:
    assert "GPU box not answering since" in text and "retrying" in text, text
    assert "last seen" in text and LAST in text, text


def test_box_refusing_answers_with_the_last_counts_within_seconds(world):
    with serve(world.cfg, box=world.box, fake=world.fake) as (bot, _, _):
        world.first_true(bot)  # the true status, through both hops
        world.pair.kill(world.pair.target)  # sshd and its sessions gone: the jump's connect is refused
        text, took = world.progress(bot)
        assert took < PROMISE_S + SLACK_S, took
        assert_last_seen(text)
        assert "hop: target" in text and "cannot connect" in text, text

        start = time.monotonic()
        assert bot.command("status") == 200  # /extract status
        (resp,) = bot.rec.wait_for("response", timeout=60)
        assert time.monotonic() - start < PROMISE_S + SLACK_S
        assert_last_seen(resp["text"])
    p, took = world.cli_status()  # a new process: the last record seen comes from the bot's file
    assert took < PROMISE_S + SLACK_S, (took, p.stdout, p.stderr)
    assert p.returncode == 1
    assert_last_seen(p.stdout)


def test_box_hanging_answers_with_the_last_counts_within_seconds(world):
    """The whole box frozen: its sshd accepts TCP but never speaks SSH, its sessions hang."""
    with serve(world.cfg, box=world.box, fake=world.fake) as (bot, _, _):
        world.first_true(bot)
        world.pair.pause(world.pair.target)
        try:
            text, took = world.progress(bot)
            assert took < PROMISE_S + SLACK_S, took
            assert_last_seen(text)
            p, took = world.cli_status()
            assert took < PROMISE_S + SLACK_S, (took, p.stdout, p.stderr)
            assert_last_seen(p.stdout)
        finally:
            world.pair.pause(world.pair.target, False)
        world.fake.set_status(done=26000)
        deadline = time.monotonic() + 60  # back: the reconnection under way gets through by itself
        while not (text := world.progress(bot)[0]).startswith("26,000 / 37,312"):
            assert time.monotonic() < deadline, text
            time.sleep(0.5)


def test_session_hanging_mid_command_answers_the_true_status_over_a_fresh_connection(world):
    """The held session stops while it runs the status command; a new connection gets through."""
    fake = world.fake
    with serve(world.cfg, box=world.box, fake=fake) as (bot, _, _):
        world.first_true(bot)
        asked = fake.verbs().count("status")
        with open(os.path.join(fake.folder, "status.sleep"), "w") as f:
            f.write("30")
        world.asked += 1
        n, start = world.asked, time.monotonic()
        event = {
            "type": "message",
            "channel": "C0PROGRESS",
            "user": STRANGER,
            "text": "progress?",
            "ts": "2.1",
        }
        assert bot.event(event, "Ev-mid") == 200
        while fake.verbs().count("status") <= asked:  # the command is running on the held session
            assert time.monotonic() - start < 10
            time.sleep(0.02)
        world.pair.pause_sessions(world.pair.target)
        os.unlink(os.path.join(fake.folder, "status.sleep"))
        fake.set_status(done=26000)
        text = bot.rec.wait_for("chat.postMessage", n, timeout=120)[n - 1]["text"]
        took = time.monotonic() - start
        assert took < PROMISE_S + SLACK_S, (took, text)
        assert text.startswith("26,000 / 37,312"), text


def test_unreachable_alert_comes_at_its_time_once_then_back(pair, fake, tmp_path):
    alert_s = 3.0
    w = World(pair, fake, tmp_path, unreachable_alert_s=alert_s)
    with serve(w.cfg, box=w.box, fake=fake) as (bot, _, rt):
        client = WebClient(token="xoxb-test", base_url=bot.api)
        scheduler = start_watcher(w.box, w.cfg, client, live=rt.handlers.live)
        ticks = Ticks(scheduler)
        try:
            bot.rec.wait_for("pins.add", timeout=30)  # the first poll got through
            paused = time.monotonic()
            pair.pause(pair.target)

            def alerts(needle: str) -> list[dict]:
                return [p for p in bot.rec.named("chat.postMessage")
                        if p["channel"] == "C0ALERTS" and needle in p["text"]]  # fmt: skip

            while not alerts("GPU box unreachable"):
                assert time.monotonic() - paused < 60
                time.sleep(0.05)
            took = time.monotonic() - paused
            # at unreachable_alert_s, late by at most one poll, which waits up to the answer bound
            # (the old code's first failed poll came after the whole retry sequence: ~60 s)
            poll_s = max(w.cfg.watcher.interval_s, timing.current().status_answer_s)
            assert alert_s - 0.1 <= took < alert_s + poll_s + SLACK_S, took
            (alert,) = alerts("GPU box unreachable")
            assert "not answering since" in alert["text"] or "failing since" in alert["text"], alert["text"]
            ticks.wait(3)
            assert len(alerts("GPU box unreachable")) == 1  # once per episode
            pair.pause(pair.target, False)
            back = time.monotonic()
            while not alerts("reachable again"):
                assert time.monotonic() - back < 60
                time.sleep(0.05)
            ticks.wait(2)
            assert len(alerts("reachable again")) == 1
            assert len(alerts("GPU box unreachable")) == 1
        finally:
            pair.pause(pair.target, False)
            scheduler.shutdown(wait=False)
            w.box.close()
