"""A stand-in ``sglang`` package written from the hook table, to test the start-up check and the
patch installation where real SGLang cannot be imported (no GPU, 11 GB of dependencies)."""

from __future__ import annotations

import os
import sys
from collections import defaultdict

from patches.hooks import HOOKS, SGLANG_VERSION


def _class_source(name: str, members: list[str]) -> str:
    return f"class {name}:\n" + ("".join(members) or "    pass\n")


def write_tree(root: str, version: str = SGLANG_VERSION, drop: str = "", change: dict | None = None) -> str:
    """Write the package under ``root``; ``drop`` leaves out one hook target, ``change`` maps a
    target to other parameters. Returns ``root`` (put it on sys.path)."""
    change = change or {}
    modules: dict[str, dict] = defaultdict(
        lambda: {"funcs": [], "classes": defaultdict(list), "init": defaultdict(list)}
    )
    flags = []
    for h in HOOKS:
        if h.target == drop:
            continue
        if h.kind == "flag":
            flags.append(h)
            continue
        mod = modules[h.module]
        owner, _, leaf = h.target.rpartition(".")
        params = ", ".join(change.get(h.target, h.params))
        if h.kind == "callable" and not owner:
            mod["funcs"].append(f"def {leaf}({params}):\n    return ({leaf!r}, locals())\n")
        elif h.kind == "callable":
            mod["classes"][owner].append(f"    def {leaf}({params}):\n        return ({leaf!r}, locals())\n")
        elif h.kind == "field":
            mod["classes"][owner].append(f"    {leaf} = None\n")
        elif h.kind == "imported":
            mod["funcs"].append(f"from {h.params[0]} import {leaf}\n")
        elif h.kind == "attribute":
            mod["init"][owner].append(f"        self.{leaf} = None\n")
    sa = modules["sglang.srt.server_args"]
    fields = tuple(h.target for h in flags)
    sa["classes"]["ServerArgs"] += [
        f"    __struct_fields__ = {fields!r}\n",
        "    @staticmethod\n    def add_cli_args(parser):\n"
        + "".join(f"        parser.add_argument({h.params[0]!r})\n" for h in flags),
    ]
    names = set(modules)
    for dotted, mod in modules.items():
        for owner, lines in mod["init"].items():
            mod["classes"][owner].append("    def __init__(self):\n" + "".join(lines))
        text = "".join(mod["funcs"]) + "".join(_class_source(c, m) for c, m in mod["classes"].items())
        path = os.path.join(root, *dotted.split("."))
        is_pkg = any(n.startswith(dotted + ".") for n in names)
        _write(os.path.join(path, "__init__.py") if is_pkg else path + ".py", text)
        parts = dotted.split(".")
        for i in range(1, len(parts)):
            init = os.path.join(root, *parts[:i], "__init__.py")
            if not os.path.exists(init):
                _write(init, "")
    with open(os.path.join(root, "sglang", "__init__.py"), "a") as f:
        f.write(f"__version__ = {version!r}\n")
    return root


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "a" if os.path.exists(path) else "w"
    with open(path, mode) as f:
        f.write(text)


def forget() -> None:
    """Drop every imported sglang module so the next import reads a new tree."""
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[name]
