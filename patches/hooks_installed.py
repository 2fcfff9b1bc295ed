"""The hook table checked against the importable sglang: the launcher's start-up check."""

from __future__ import annotations

import ast
import importlib
import inspect

from .hooks import HOOKS, SGLANG_VERSION, Hook, IncompatibleSGLang
from .hooks_source import _self_assigns


def _sig_params(obj) -> tuple[str, ...]:
    out: list[str] = []
    params = list(inspect.signature(obj).parameters.values())
    P = inspect.Parameter
    for i, p in enumerate(params):
        if p.kind is P.VAR_POSITIONAL:
            out.append("*" + p.name)
            continue
        if p.kind is P.KEYWORD_ONLY and not any(
            q.kind in (P.VAR_POSITIONAL, P.KEYWORD_ONLY) for q in params[:i]
        ):
            out.append("*")
        out.append("**" + p.name if p.kind is P.VAR_KEYWORD else p.name)
        if p.kind is P.POSITIONAL_ONLY and (
            i + 1 == len(params) or params[i + 1].kind is not P.POSITIONAL_ONLY
        ):
            out.append("/")
    return tuple(out)


def _getattr_path(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _class_has(cls: type, name: str) -> bool:
    if hasattr(cls, name) or name in getattr(cls, "__dataclass_fields__", {}):
        return True
    if name in getattr(cls, "__struct_fields__", ()):
        return True
    return any(name in getattr(k, "__annotations__", {}) for k in cls.__mro__)


def _source_ast(obj) -> ast.AST:
    import textwrap

    node = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    return node.body[0]


def installed_version() -> str:
    try:
        import sglang
    except ImportError as e:
        raise IncompatibleSGLang(
            f"sglang is not importable here ({e}); install sglang=={SGLANG_VERSION}"
        ) from None
    return str(getattr(sglang, "__version__", "unknown"))


def _check_flags(hooks: list[Hook], problems: list[str]) -> None:
    import argparse

    from sglang.srt.server_args import ServerArgs

    fields = getattr(ServerArgs, "__struct_fields__", ())
    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    for hook in hooks:
        if hook.target not in fields:
            problems.append(f"server flag {hook.params[0]} ({hook.target}) is missing")
        elif hook.params[0] not in parser._option_string_actions:
            problems.append(f"server flag {hook.params[0]} ({hook.target}) is no longer a command-line flag")


def check_installed(hooks: tuple[Hook, ...] = HOOKS, version: str = SGLANG_VERSION) -> list[str]:
    """Problems with the importable sglang. A wrong version stops here: the rest is not checked."""
    found = installed_version()
    if found != version:
        return [f"SGLang version is {found!r}; this patch is written for {version} only"]
    problems: list[str] = []
    flags = [h for h in hooks if h.kind == "flag"]
    for hook in hooks:
        if hook.kind == "flag":
            continue
        where = f"{hook.module}.{hook.target}"
        try:
            mod = importlib.import_module(hook.module)
        except Exception as e:  # an import error of any kind means the hook is unusable
            problems.append(f"module {hook.module} cannot be imported: {type(e).__name__}: {e}")
            continue
        owner, _, leaf = hook.target.rpartition(".")
        try:
            if hook.kind == "field":
                if not _class_has(_getattr_path(mod, owner), leaf):
                    problems.append(f"{where} is missing")
            elif hook.kind == "attribute":
                cls = _getattr_path(mod, owner)
                if not (_class_has(cls, leaf) or _self_assigns(_source_ast(cls), leaf)):
                    problems.append(f"{where} is missing")
            elif hook.kind == "callable":
                got = _sig_params(_getattr_path(mod, hook.target))
                if got != hook.params:
                    problems.append(f"{where} has parameters {got}, expected {hook.params}")
            elif hook.kind == "imported":
                src = importlib.import_module(hook.params[0])
                if inspect.unwrap(getattr(mod, leaf)) is not inspect.unwrap(getattr(src, leaf)):
                    problems.append(f"{hook.module} no longer imports {leaf} from {hook.params[0]}")
        except AttributeError:
            problems.append(f"{where} is missing")
        except (OSError, TypeError, ValueError, SyntaxError) as e:
            problems.append(f"{where} cannot be inspected: {e}")
    if flags:
        try:
            _check_flags(flags, problems)
        except Exception as e:
            problems.append(f"server flags cannot be checked: {type(e).__name__}: {e}")
    return problems


def require_installed() -> None:
    """Raise IncompatibleSGLang with every problem listed, or return quietly."""
    problems = check_installed()
    if problems:
        lines = "\n  - ".join(problems)
        raise IncompatibleSGLang(
            f"refusing to start: the hsx dump patch is written for SGLang {SGLANG_VERSION} and its hook "
            f"points do not hold here:\n  - {lines}\nInstall sglang=={SGLANG_VERSION} or update patches/."
        )
