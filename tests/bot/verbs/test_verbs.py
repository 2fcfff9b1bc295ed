"""The verb table drives every front-end: the chat parser and its help, `hsx VERB`, and the
Slack manifest's /extract entry."""

from __future__ import annotations

import json
import os

import pytest

from bot import cli
from bot.verbs.commands import HELP, Command, parse
from bot.verbs.table import EXTRACTION, VERBS
from bot.wiring import make_handlers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TERMINAL = [v for v in VERBS if v.terminal]
# not verbs of /extract (train, measure, regenerate, pipeline: words of their own kinds)
ONLY_TERMINAL = {"bot", "deploy", "demo", "train", "measure", "regenerate", "pipeline"}


def _spellings(v, f) -> tuple[str, list[str]]:
    """The same flag as chat text and as `hsx` argv."""
    if f.kind == "path":
        return f"{v.name} /data/old", [v.name, "/data/old"]
    if f.kind == "count":
        return f"{v.name} 7", [v.name, "-" + f.field, "7"]
    return f"{v.name} {f.name}", [v.name, f.name]


def test_the_committed_manifest_has_the_tables_slash_command():
    with open(os.path.join(ROOT, "deploy", "slack-manifest.yaml")) as f:
        manifest = f.read()
    assert EXTRACTION.manifest_entry() in manifest, (
        f"deploy/slack-manifest.yaml: write the /extract entry as\n{EXTRACTION.manifest_entry()}"
    )


def test_chat_help_and_parser_know_every_verb_and_flag():
    assert HELP.splitlines() == [v.chat_help() for v in VERBS]
    for v in VERBS:
        assert f"{v.name}{v.usage}`" in HELP
        assert ("(operators)" in v.chat_help()) == v.for_operators
        if not any(f.kind == "path" for f in v.flags):
            assert parse(v.name) == Command(v.name), v.name
        for f in v.flags:
            text, _ = _spellings(v, f)
            cmd = parse(text)
            assert cmd.verb == v.name and getattr(cmd, f.field) not in ("", False, Command.which), text
    assert parse("chart --bogus").problem == "`chart` takes no arguments"


def test_hsx_has_the_terminal_verbs_with_the_same_flags_as_chat():
    p = cli.parser()
    (sub,) = [a for a in p._actions if a.dest == "verb"]
    assert set(sub.choices) == {v.name for v in TERMINAL} | ONLY_TERMINAL
    for v in TERMINAL:
        dir_ = ["/data/old"] if any(f.kind == "path" for f in v.flags) else []
        assert p.parse_args([v.name, "--json", *dir_]).json is v.json
        for f in v.flags:
            text, argv = _spellings(v, f)
            args = p.parse_args(argv)
            fields = {g.field: getattr(args, g.field) for g in v.flags}
            assert Command(v.name, **fields) == parse(text), text


@pytest.mark.parametrize("v", VERBS, ids=lambda v: v.name)
def test_who_may_run_a_verb_is_the_tables_rule(v, fake, cfg):
    h = make_handlers(cfg, fake.box())
    args = " /data/old" if any(f.kind == "path" for f in v.flags) else ""
    reply = h.ask(f"{v.name}{args}", "U0SOMEONE")
    refused = "refused: only operators" in reply.text
    assert refused == v.operator, reply.text
    if refused:
        assert (
            fake.calls() == []
            and f"`{parse(v.name + args).action}` → refused: not an operator" in reply.audit
        )
    for f in v.flags:
        if f.operator:
            assert "refused: only operators" in h.ask(f"{v.name} {f.name}", "U0SOMEONE").text


@pytest.fixture
def ops_conf(fake, tmp_path):
    conf = tmp_path / "ops.toml"
    conf.write_text(
        f'[remote]\ntransport = "local"\nrunner = "{fake.runner}"\nrunner_config = "{fake.config}"\n'
        f'[slack]\naudit_log = "{tmp_path}/audit.jsonl"\n'
    )
    return str(conf)


def test_hsx_stop_does_not_ask_and_is_audited_as_the_terminal(fake, ops_conf, tmp_path, capsys):
    assert cli.main(["stop", "--config", ops_conf]) == 0
    assert capsys.readouterr().out == "`stop`: stop accepted\n" and fake.verbs() == ["stop"]
    with open(tmp_path / "audit.jsonl") as f:
        attempt, entry = [json.loads(line) for line in f]
    assert (attempt["user"], attempt["action"], attempt["result"]) == ("terminal", "stop", "attempt")
    assert (entry["user"], entry["action"], entry["result"]) == ("terminal", "stop", "ok")


def test_hsx_logs_passes_its_flags_and_refuses_a_count_out_of_range(fake, ops_conf, capsys):
    assert cli.main(["logs", "-n", "3", "--crash", "--config", ops_conf]) == 0
    assert fake.calls()[-1][-4:] == ["-n", "3", "--which", "crash"]
    assert capsys.readouterr().out.startswith("last 3 crash log lines:")
    assert cli.main(["logs", "-n", "0", "--config", ops_conf]) == 1
    assert capsys.readouterr().out.startswith("`logs` takes a number of lines, 1..500\n\n`/extract status")
    assert len(fake.calls()) == 1


def test_hsx_start_force_json_prints_the_runners_reply(fake, ops_conf, capsys):
    assert cli.main(["start", "--force", "--json", "--config", ops_conf]) == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True, "message": "start accepted"}
    assert fake.calls()[-1][0] == "start" and "--force" in fake.calls()[-1]
    assert EXTRACTION.table["start"].operator and not EXTRACTION.table["start"].report
