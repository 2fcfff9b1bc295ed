"""docs/commands.md's verb tables are what the kinds tables make of them (scripts/commands_doc.py):
a verb, a flag or a kind added to a table and not to the doc, or the other way round, fails here
with the command that mends it."""

from __future__ import annotations

import importlib.util
import os

from tests.conftest import ROOT


def _script():
    spec = importlib.util.spec_from_file_location(
        "commands_doc", os.path.join(ROOT, "scripts", "commands_doc.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_docs_verb_tables_are_the_kinds_tables():
    doc = _script()
    with open(doc.DOC, encoding="utf-8") as f:
        text = f.read()
    assert doc.block() in text, (
        "docs/commands.md is behind the kinds tables: python scripts/commands_doc.py --write"
    )


def test_every_verb_of_every_kind_and_of_the_box_is_in_the_tables():
    from bot.verbs.table import KINDS
    from runner.contract.kinds import KINDS as BOX

    block = _script().block()
    for kind in KINDS.values():
        for v in kind.verbs:
            assert f"`{kind.slash} {v.name}" in block, (kind.slash, v.name)
    for spec in BOX.values():
        assert f"`hsx-runner {spec.name} " in block and ",".join(spec.actions) in block, spec.name
