"""The mechanics every kind shares, once, over the kinds table: its slash command in the manifest,
chat words parsed to its fixed verbs or to help, a start run for an operator and refused a
stranger (both audited), a stop that asks first and whose button runs it, and `hsx KIND` from a
terminal (a refused start exits 1, a stop does not ask). Through the bot's signed HTTP endpoint
and the fake runner (tests/bot/conftest.py); each kind's own words are in its own module."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest

from bot import cli
from bot.verbs.commands import Command, parse
from bot.verbs.table import KINDS
from runner.contract.replies import REFUSED
from runner.job.supervised import refused
from tests.conftest import ROOT

from ..http_bot import OPERATOR, STRANGER, serve

EVERY = sorted(KINDS.values(), key=lambda k: k.name)
WORDED = [k for k in EVERY if k.word]  # run as `hsx-runner WORD ACTION` (the extraction's verbs are bare)
ALL_VERBS = {v.name for k in EVERY for v in k.verbs}


def _ids(kinds):
    return [k.name for k in kinds]


@pytest.fixture
def any_cfg(cfg):
    """The bot's config with a trainer named: a kind unconfigured on the box is still asked."""
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))


@pytest.mark.parametrize("kind", EVERY, ids=_ids(EVERY))
def test_the_manifest_has_the_kinds_slash_command(kind):
    with open(os.path.join(ROOT, "deploy", "slack-manifest.yaml")) as f:
        assert kind.manifest_entry() in f.read()


@pytest.mark.parametrize("kind", EVERY, ids=_ids(EVERY))
def test_chat_words_become_the_kinds_fixed_verbs_or_help(kind):
    for verb in kind.verbs:
        if any(f.kind == "path" for f in verb.flags):
            continue  # `adopt DIR`: its argument is checked with its own test
        assert parse(f"{kind.slash} {verb.name}", kind) == Command(verb.name, kind=kind.name)
        assert parse(verb.name, kind) == Command(verb.name, kind=kind.name)
    assert Command("stop", kind=kind.name).action == kind.action("stop")
    others = sorted(ALL_VERBS - set(kind.table))  # another kind's verb is not this one's
    for bad in ("start; rm -rf /", "status --bogus", "status now please", "x" * 300, *others):
        cmd = parse(bad, kind)
        assert (cmd.verb, cmd.kind) == ("help", kind.name) and cmd.problem, bad


@pytest.mark.parametrize("kind", WORDED, ids=_ids(WORDED))
def test_an_operators_start_runs_the_fixed_verb_and_audits(kind, fake, any_cfg):
    """The channel reads the box's answer without its paths (issue 47); the operator who asked
    gets them, to themself alone."""
    said = f"{kind.name} started (pid 77); /data/out-{kind.word}"
    fake.reply(f"{kind.word}-start", {"started": True, "pid": 77, "message": said})
    with serve(any_cfg, box=fake.box(), fake=fake) as (bot, _, _):
        bot.command("start", command=kind.slash)
        channel, own = bot.rec.wait_for("response", 2)
        assert channel["response_type"] == "in_channel" and "/data" not in channel["text"]
        assert f"{kind.name} started (pid 77); …" in channel["text"]
        assert f"<@{OPERATOR}> `{kind.word} start` → ok" in channel["text"]
        assert own["response_type"] == "ephemeral" and said in own["text"]
        assert fake.calls() == [fake.argv(kind.word, "start")]
        audit = bot.audit()
    action = kind.action("start")
    assert [(e["action"], e["result"], e["user"]) for e in audit] == [
        (action, "attempt", OPERATOR),
        (action, "ok", OPERATOR),
    ]


@pytest.mark.parametrize("kind", WORDED, ids=_ids(WORDED))
def test_a_refused_start_says_the_boxs_reason_and_is_audited_as_refused(kind, fake, any_cfg):
    why = f"/data/out-{kind.word} holds a run: resume it, or move it aside"
    fake.reply(f"{kind.word}-start", refused(why).payload(), code=REFUSED)  # as the box's runner says it
    with serve(any_cfg, box=fake.box(), fake=fake) as (bot, _, _):
        bot.command("start", command=kind.slash)
        channel, own = bot.rec.wait_for("response", 2)
        assert "refused: … holds a run: resume it" in channel["text"] and "/data" not in channel["text"]
        assert own["response_type"] == "ephemeral" and f"refused: {why}" in own["text"]
        assert [e["result"] for e in bot.audit()] == ["attempt", "refused"]


@pytest.mark.parametrize("kind", WORDED, ids=_ids(WORDED))
def test_a_strangers_start_is_refused_runs_nothing_and_is_audited(kind, fake, any_cfg):
    with serve(any_cfg, box=fake.box(), fake=fake) as (bot, _, _):
        bot.command("start", user=STRANGER, command=kind.slash)
        (resp,) = bot.rec.wait_for("response")
        assert resp["response_type"] == "ephemeral"
        assert f"only operators may `{kind.action('start')}`" in resp["text"]
        assert fake.calls() == []
        (entry,) = bot.audit()
    assert entry["action"] == kind.action("start") and entry["result"].startswith("refused")
    assert entry["user"] == STRANGER


@pytest.mark.parametrize("kind", WORDED, ids=_ids(WORDED))
def test_a_stop_asks_first_and_its_button_runs_the_stop(kind, fake, any_cfg):
    with serve(any_cfg, box=fake.box(), fake=fake) as (bot, _, _):
        bot.command("stop", command=kind.slash)
        (resp,) = bot.rec.wait_for("response")
        assert fake.calls() == []  # asked, not run
        assert kind.table["stop"].question in json.dumps(resp)
        button = resp["blocks"][1]["elements"][0]
        assert button["value"] == kind.action("stop")
        assert bot.click(button["action_id"], button["value"], channel="C0PROGRESS") == 200
        done = bot.rec.wait_for("response", 3)[-1]
        assert f"`{kind.action('stop')}`: {kind.word}-stop accepted" in done["text"]
    assert fake.calls() == [fake.argv(kind.word, "stop")]


@pytest.mark.parametrize("kind", WORDED, ids=_ids(WORDED))
def test_hsx_from_a_terminal_a_refused_start_exits_1_and_a_stop_does_not_ask(kind, fake, conf, capsys):
    why = f"/data/out-{kind.word} holds a run: resume it, or move it aside"
    fake.reply(f"{kind.word}-start", refused(why).payload(), code=REFUSED)
    assert cli.main([kind.word, "start", "--json", "--config", conf]) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == why
    assert cli.main([kind.word, "start", "--config", conf]) == 1
    assert capsys.readouterr().out == f"`{kind.action('start')}` refused: {why}\n"
    assert cli.main([kind.word, "stop", "--config", conf]) == 0
    assert capsys.readouterr().out == f"`{kind.action('stop')}`: {kind.word}-stop accepted\n"
    assert fake.calls() == [fake.argv(kind.word, a) for a in ("start", "start", "stop")]
