"""The shared parser and handlers, and the terminal console over them."""

from __future__ import annotations

import io

import pytest

from bot.commands import Command, parse
from bot.console import run_console
from bot.wiring import make_handlers


@pytest.mark.parametrize(
    "text,verb",
    [
        ("progress?", "status"),
        ("  STATUS?? ", "status"),
        ("<@U0BOT> progress?", "status"),
        ("/extract resume", "resume"),
        ("Resume", "resume"),
        ("/extract", "help"),
        ("", "help"),
    ],
)
def test_parse_known_forms(text, verb):
    assert parse(text).verb == verb and not parse(text).problem


def test_parse_arguments():
    assert parse("logs 50") == Command("logs", n=50)
    assert parse("/extract logs -n 5") == Command("logs", n=5)
    assert parse("verify --repair --quick") == Command("verify", repair=True, quick=True)
    assert parse("verify --repair").mutating and not parse("verify").mutating
    assert parse("stop").confirmed is False and parse("stop --yes").confirmed is True


@pytest.mark.parametrize(
    "text",
    [
        "resume; rm -rf /",
        "$(id)",
        "`id`",
        "status\nrm -rf /",
        "a" * 10_000,
        "resume --force",
        "logs 0",
        "/extractresume",
        "status && reboot",
        "stop now",
        None,
    ],
)
def test_parse_rejects_with_a_reason(text):
    cmd = parse(text)
    assert cmd.verb == "help" and cmd.problem


def test_console_answers_and_stops_only_after_yes(fake, cfg):
    inp = io.StringIO("progress?\n/extract stop\nn\n/extract stop\nyes\nresume; rm -rf /\n")
    out = io.StringIO()
    run_console(fake.box(), cfg, inp, out)
    text = out.getvalue()
    assert "25,581 / 37,312 — 68.6% done" in text
    assert "not stopped" in text and "input refused" in text
    assert "audit: console `stop` → ok" in text
    assert fake.verbs() == ["status", "stop"]
    assert text.endswith("hsx> \n")


def test_operator_group_lookup_failure_grants_nothing(fake, cfg):
    cfg.slack.operator_group = "S0OPS"

    def broken(user):
        raise RuntimeError("usergroups.users.list failed")

    h = make_handlers(cfg, fake.box(), in_group=broken)
    reply = h.ask("resume", "U0SOMEONE")
    assert reply.error and "refused" in reply.text and fake.calls() == []
    assert make_handlers(cfg, fake.box(), in_group=lambda u: u == "U0INGROUP").is_operator("U0INGROUP")


def test_verify_and_refused_start_are_rendered(fake, cfg):
    h = make_handlers(cfg, fake.box())
    fake.reply("verify", {"total": 5, "ok": [0, 1, 3], "missing": [2], "corrupt": [], "failed": [4]}, code=1)
    assert h.ask("verify", "anyone").text.startswith(
        "verify: 3 / 5 sound — 1 missing, 0 corrupt, 1 failed\nmissing: 2"
    )
    fake.reply(
        "verify", {"total": 5, "ok": 4, "missing": [], "corrupt": [], "failed": [], "unrecorded": [3]}, code=1
    )
    text = h.ask("verify", "anyone").text
    assert "not yet in the manifest (the next run records them): 3" in text and "every sample" not in text
    fake.reply("start", {"ok": False, "message": "job is already running (pid 77)"}, code=3)
    reply = h.ask("start", "U0OPERATOR")
    assert reply.text == "`start` refused: job is already running (pid 77)" and "→ refused" in reply.audit
