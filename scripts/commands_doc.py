"""docs/commands.md's verb tables, made from the kinds tables (bot/verbs/table.py for chat and
`hsx`, runner/cli.py's parser, built from runner/contract/kinds.py, for `hsx-runner`), so the
doc cannot name a verb or a flag that is not there. tests/test_commands_doc.py compares.

    python scripts/commands_doc.py           # print the tables
    python scripts/commands_doc.py --write   # put them in docs/commands.md, between the marks
"""

from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "commands.md")
BEGIN = "<!-- verbs: made by scripts/commands_doc.py from the kinds tables; edit those, then run it with --write -->"
END = "<!-- /verbs -->"


def _terminal(word: str, v) -> str:
    """`hsx [WORD] VERB` with its flags as the terminal takes them (`logs [-n N]`)."""
    parts: list[str] = []
    for f in v.flags:
        if f.kind == "choice":
            group = "[" + "|".join(g.name for g in v.flags if g.dest == f.dest) + "]"
            parts += [] if group in parts else [group]
        elif f.kind == "count":
            parts.append(f"[-{f.field} {f.name}]")
        else:
            parts.append(f.name if f.kind == "path" else f"[{f.name}]")
    json_flag = " [--json]" if v.json else ""
    return f"`{' '.join(['hsx', *([word] if word else []), v.name, *parts])}{json_flag}`"


def _cells(*cells: str) -> str:
    """A table row: a ``|`` inside a cell (``[--runner|--server]``) escaped, as Markdown tables need."""
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _who(v) -> str:
    if v.operator:
        return "operators" + (", asks first" if v.confirm else "")
    if any(f.operator for f in v.flags):
        return "members; " + ", ".join(f"`{f.name}` operators" for f in v.flags if f.operator)
    return "members" + (f", once per {v.every_s:g} s each" if v.every_s else "")


def chat_tables() -> str:
    from bot.verbs.table import KINDS

    out = []
    for kind in KINDS.values():
        out += [f"**`{kind.slash}`**: {kind.description}", "", "| chat | terminal | who may | what |",
                "| --- | --- | --- | --- |"]  # fmt: skip
        for v in kind.verbs:
            terminal = _terminal(kind.word, v) if v.terminal else "(chat only)"
            out.append(_cells(f"`{kind.slash} {v.name}{v.usage}`", terminal, _who(v), v.help))
        out.append("")
    return "\n".join(out)


def runner_table() -> str:
    from runner.cli import parser

    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    out = ["**`hsx-runner`** (on the GPU box; each takes `--config` and `--json`)", "",
           "| command | what |", "| --- | --- |"]  # fmt: skip
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, p in sub.choices.items():
        usage = " ".join(p.format_usage().split())
        usage = re.sub(r"^usage: ", "", usage).replace(" [-h]", "")
        usage = usage.replace(" [--config CONFIG]", "").replace(" [--json]", "")
        out.append(_cells(f"`{usage}`", helps.get(name) or ""))
    return "\n".join(out) + "\n"


def block() -> str:
    return f"{BEGIN}\n{chat_tables()}\n{runner_table()}{END}"


def main(argv: list[str]) -> int:
    text = block()
    if "--write" not in argv:
        print(text)
        return 0
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        print(f"{DOC} has no {BEGIN!r} … {END!r} marks", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(head + text + rest.split(END, 1)[1])
    return 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    sys.exit(main(sys.argv[1:]))
