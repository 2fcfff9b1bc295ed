"""Who may ask what, from where, how often, and once: through the bot's signed HTTP endpoint."""

from __future__ import annotations

import os
import time

import pytest

from .http_bot import serve


@pytest.fixture
def bot(fake, cfg):
    with serve(cfg, box=fake.box(), fake=fake) as (client, _, _):
        yield client


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
