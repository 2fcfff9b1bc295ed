"""The kinds table (bot/verbs/table.py KINDS) is the one place that knows the job kinds: every verb of
every kind has one handler, every confirmation comes back to its own kind, and no other module
routes by a kind's slash command, word or alert key."""

from __future__ import annotations

import ast
import os

from bot import cli
from bot.verbs import handlers
from bot.verbs.commands import Command, confirmed_command, parse
from bot.verbs.table import EXTRACTION, KINDS, TRAINING, kind_of_key, kind_of_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_every_verb_of_every_kind_has_one_handler_and_no_handler_is_stray():
    assert set(handlers.RUN) == set(KINDS) == set(handlers.ASK)
    for name, kind in KINDS.items():
        verbs = {v.name for v in kind.verbs} - {"help"}  # help is the table's own text
        assert set(handlers.RUN[name]) == verbs, name
        assert set(handlers.ASK[name]) <= {v.name for v in kind.verbs if v.confirm}, name


def test_a_confirmed_verb_asks_its_question_and_its_answer_comes_back_to_its_kind():
    for kind in KINDS.values():
        for v in kind.verbs:
            if not v.confirm:
                continue
            cmd = Command(v.name, kind=kind.name)
            if v.name in handlers.ASK[kind.name]:  # its value binds what it asked (bot/verbs/confirm.py)
                assert confirmed_command(cmd.name).until == 0, "a bare value binds nothing: expired"
                continue
            assert v.question, f"{cmd.name} asks nothing"
            assert confirmed_command(cmd.name) == Command(v.name, kind=kind.name, confirmed=True), cmd.name
    assert confirmed_command("train stop").kind == TRAINING.name
    assert confirmed_command("stop").kind == EXTRACTION.name
    for stray in ("train start", "start", "train", "", None, 7, "extraction stop"):
        assert confirmed_command(stray) is None, stray  # not a question hsx asked


def test_a_kinds_text_and_keys_name_it():
    assert kind_of_text("/train  stop") is TRAINING and kind_of_text("/TRAIN") is TRAINING
    assert kind_of_text("/extract stop") is EXTRACTION and kind_of_text("progress?") is EXTRACTION
    assert kind_of_text("/trainstop") is EXTRACTION  # the extraction's parser says it is unknown
    assert parse("/trainstop").verb == "help"
    assert kind_of_key("train:crashed:3") is TRAINING and kind_of_key("crash:3") is EXTRACTION
    assert Command("stop", kind=TRAINING.name).action == "train stop"
    assert Command("verify", repair=True).action == "verify --repair"


def test_hsx_json_has_a_call_for_each_terminal_verb_with_json():
    assert set(cli.JSON_CALLS) == {v.name for v in EXTRACTION.verbs if v.terminal and v.json}


def _literals(path: str) -> list[tuple[int, str]]:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and not _is_doc(tree, n)
    ]


def _is_doc(tree: ast.AST, node: ast.Constant) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(n, clean=False):
            body = n.body[0]
            if isinstance(body, ast.Expr) and body.value is node:
                return True
    return False


def test_no_module_but_the_table_routes_by_a_kinds_marks():
    """A third kind is a row of KINDS: no other module compares text, values or keys with a
    kind's slash command, its word or its alert key (chat texts may still name them)."""
    marks = {k.key for k in KINDS.values() if k.key} | {k.word + " " for k in KINDS.values() if k.word}
    marks |= {k.slash for k in KINDS.values()}
    bad = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "bot")):
        for f in files:
            path = os.path.join(dirpath, f)
            if not f.endswith(".py") or path.endswith(os.path.join("bot", "verbs", "table.py")):
                continue
            bad += [(os.path.relpath(path, ROOT), line, s) for line, s in _literals(path) if s in marks]
    assert not bad, bad
