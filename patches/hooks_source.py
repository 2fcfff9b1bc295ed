"""The hook table checked against SGLang's sources with ``ast`` only (a wheel or a directory; no
import of sglang): the wheel compatibility test."""

from __future__ import annotations

import ast
import os
import re
import zipfile

from .hooks import _FLAG_FIELDS_DIR, HOOKS, SGLANG_VERSION, Hook


def _ast_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    a = fn.args
    out = [x.arg for x in a.posonlyargs]
    if a.posonlyargs:
        out.append("/")
    out += [x.arg for x in a.args]
    if a.vararg:
        out.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        out.append("*")
    out += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        out.append("**" + a.kwarg.arg)
    return tuple(out)


def _find(body: list[ast.stmt], name: str) -> ast.AST | None:
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def _resolve_ast(tree: ast.Module, qualname: str) -> ast.AST | None:
    node: ast.AST | None = tree
    for part in qualname.split("."):
        node = _find(getattr(node, "body", []), part)
        if node is None:
            return None
    return node


def _class_declares(cls: ast.ClassDef, name: str) -> bool:
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
    return False


def _self_assigns(cls: ast.ClassDef, name: str) -> bool:
    """``self.name = ...`` (or annotated) in any method of the class, or a property."""
    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if fn.name == name and any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list):
            return True
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                continue
            for t in targets:
                if (
                    isinstance(t, ast.Attribute)
                    and t.attr == name
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                ):
                    return True
    return False


def _flag_problem(hook: Hook, annotation: ast.expr | None) -> str | None:
    """The field exists; it must still be on the command line under the expected spelling."""
    text = ast.unparse(annotation) if annotation is not None else ""
    if re.search(r"no_cli\s*=\s*True", text):
        return f"server flag {hook.params[0]} ({hook.target}) is no longer a command-line flag"
    m = re.search(r"cli_name\s*=\s*['\"]([^'\"]+)['\"]", text)
    if m and m.group(1) != hook.params[0]:
        return f"server flag {hook.target} is now spelled {m.group(1)}, not {hook.params[0]}"
    return None


class SourceTree:
    """Read access to an SGLang source tree: a wheel (zip) or an unpacked directory."""

    def __init__(self, path: str):
        self.path = path
        self._zip = zipfile.ZipFile(path) if zipfile.is_zipfile(path) else None
        self._trees: dict[str, ast.Module | None] = {}

    def names(self) -> list[str]:
        if self._zip is not None:
            return self._zip.namelist()
        out = []
        for root, _dirs, files in os.walk(self.path):
            out += [os.path.relpath(os.path.join(root, f), self.path).replace(os.sep, "/") for f in files]
        return out

    def read(self, rel: str) -> str | None:
        try:
            if self._zip is not None:
                return self._zip.read(rel).decode("utf-8")
            with open(os.path.join(self.path, rel), encoding="utf-8") as f:
                return f.read()
        except (KeyError, OSError):
            return None

    def module(self, dotted: str) -> ast.Module | None:
        if dotted not in self._trees:
            base = dotted.replace(".", "/")
            text = self.read(base + ".py")
            if text is None:
                text = self.read(base + "/__init__.py")
            self._trees[dotted] = ast.parse(text) if text is not None else None
        return self._trees[dotted]

    def version(self) -> str | None:
        text = self.read("sglang/_version.py") or self.read("sglang/version.py") or ""
        m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text)
        if m:
            return m.group(1)
        for name in self.names():
            if name.endswith(".dist-info/METADATA"):
                m = re.search(r"^Version:\s*(\S+)", self.read(name) or "", re.M)
                if m:
                    return m.group(1)
        return None


def _flag_fields(src: SourceTree) -> dict[str, ast.expr | None]:
    fields: dict[str, ast.expr | None] = {}
    for name in src.names():
        if name.startswith(_FLAG_FIELDS_DIR) and name.endswith(".py"):
            text = src.read(name) or ""
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ClassDef):
                    for st in node.body:
                        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                            fields[st.target.id] = st.annotation
    return fields


def check_sources(path: str, hooks: tuple[Hook, ...] = HOOKS, version: str = SGLANG_VERSION) -> list[str]:
    """Problems found by reading the sources at ``path`` (wheel or directory) with ``ast``."""
    src = SourceTree(path)
    problems = []
    found = src.version()
    if found != version:
        problems.append(f"SGLang version is {found!r}; this patch is written for {version} only")
    flags = None
    for hook in hooks:
        where = f"{hook.module}.{hook.target}"
        if hook.kind == "flag":
            flags = _flag_fields(src) if flags is None else flags
            if hook.target not in flags:
                problems.append(f"server flag {hook.params[0]} ({hook.target}) is missing")
            elif p := _flag_problem(hook, flags[hook.target]):
                problems.append(p)
            continue
        tree = src.module(hook.module)
        if tree is None:
            problems.append(f"module {hook.module} is missing")
            continue
        owner, _, leaf = hook.target.rpartition(".")
        if hook.kind == "imported":
            if not any(
                isinstance(n, ast.ImportFrom)
                and n.module == hook.params[0]
                and any(a.name == leaf for a in n.names)
                for n in ast.walk(tree)
            ):
                problems.append(f"{hook.module} no longer imports {leaf} from {hook.params[0]}")
            continue
        if hook.kind in ("field", "attribute"):
            cls = _resolve_ast(tree, owner)
            if not isinstance(cls, ast.ClassDef):
                problems.append(f"class {hook.module}.{owner} is missing")
            elif not (_class_declares(cls, leaf) if hook.kind == "field" else _self_assigns(cls, leaf)):
                problems.append(f"{where} is missing")
            continue
        fn = _resolve_ast(tree, hook.target)
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            problems.append(f"{where} is missing")
        elif hook.kind == "callable" and _ast_params(fn) != hook.params:
            problems.append(f"{where} has parameters {_ast_params(fn)}, expected {hook.params}")
    return problems
