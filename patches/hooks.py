"""The one table of SGLang hook points the dump patch relies on, and two ways to check it.

``check_installed()`` imports the installed sglang (launcher start-up); ``check_sources()`` reads
the sources with ``ast`` only (the wheel compatibility test, no import of sglang). Both return a
list of problems, empty when the table holds. Stdlib only at import time.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import zipfile
from dataclasses import dataclass

from runner.contract.errors import HsxError

SGLANG_VERSION = "0.5.23"

_FLAG_FIELDS_DIR = "sglang/srt/arg_groups/fields/"


@dataclass(frozen=True)
class Hook:
    """One thing the patch needs from SGLang.

    kind: ``callable`` (``params`` is the exact parameter list, ``*`` marks keyword-only),
    ``field`` (declared on the class: dataclass/struct field, enum member, class attribute),
    ``attribute`` (assigned on ``self`` in a method, e.g. ``Req.__init__``),
    ``flag`` (``target`` is a ServerArgs field, ``params`` holds its command-line spelling),
    ``imported`` (``module`` imports ``target`` by name from ``params[0]``: patch it where it is used).
    """

    kind: str
    module: str
    target: str
    params: tuple[str, ...] = ()
    why: str = ""


_BRP = "sglang.srt.managers.scheduler_components.batch_result_processor"
_SB = "sglang.srt.managers.schedule_batch"
_SA = "sglang.srt.server_args"


def _flag(field: str, why: str) -> Hook:
    return Hook("flag", _SA, field, ("--" + field.replace("_", "-"),), why)


HOOKS: tuple[Hook, ...] = (
    # launcher side
    Hook("callable", "sglang.srt.plugins", "load_plugins", (), "the stock launcher loads plugins first"),
    Hook("callable", _SA, "prepare_server_args", ("argv",), "parse the server command line"),
    Hook("callable", _SA, "ServerArgs.resolve_once", ("self",), "resolve before checking the result"),
    Hook(
        "callable",
        "sglang.srt.arg_groups.model_override_base",
        "resolving_view",
        ("server_args",),
        "read resolved values (aux capture, hidden-state mode)",
    ),
    Hook(
        "callable",
        "sglang.srt.entrypoints.http_server",
        "launch_server",
        (
            "server_args",
            "init_tokenizer_manager_func",
            "run_scheduler_process_func",
            "run_detokenizer_process_func",
            "execute_warmup_func",
            "launch_callback",
        ),
        "injects our scheduler entry; children are spawned, so patches must be applied there",
    ),
    Hook(
        "callable",
        "sglang.srt.utils.common",
        "kill_process_tree",
        ("parent_pid", "include_parent", "skip_pid", "wait_timeout"),
        "clean up children like the stock launcher",
    ),
    # scheduler side
    Hook(
        "callable",
        "sglang.srt.managers.scheduler",
        "run_scheduler_process",
        (
            "server_args",
            "port_args",
            "gpu_id",
            "tp_rank",
            "pp_rank",
            "dp_rank",
            "pipe_writer",
            "display_tp_rank",
            "display_dp_rank",
            "display_moe_ep_rank",
        ),
        "wrapped: apply the patch, then run the real scheduler",
    ),
    Hook(
        "callable",
        _BRP,
        "SchedulerBatchResultProcessor._append_prefill_hidden_states",
        (
            "self",
            "*",
            "req",
            "logits_output",
            "hidden_state_offset",
            "capture_hidden_mode",
            "extend_input_len",
            "store",
        ),
        "replaced: per request slice of the batch's hidden rows; must return the advanced offset",
    ),
    Hook(
        "callable",
        "sglang.srt.managers.scheduler",
        "Scheduler._copy_result_to_cpu",
        ("self", "batch_result", "batch"),
        "wrapped: the next forward waits for the copy of the hidden rows (it uses self.forward_stream)",
    ),
    Hook(
        "callable",
        "sglang.srt.managers.utils",
        "GenerationBatchResult.copy_to_cpu",
        ("self", "return_logprob", "return_hidden_states"),
        "wrapped: with the overlap schedule, also copy last_hidden_states off the GPU in time",
    ),
    Hook(
        "callable",
        "sglang.srt.model_executor.model_runner_components.attention_backend_setup",
        "configure_aux_hidden_state_capture",
        (
            "*",
            "model",
            "eagle_use_aux_hidden_state",
            "eagle_aux_hidden_state_layer_ids",
            "dflash_use_aux_hidden_state",
            "dflash_target_layer_ids",
            "is_dspark",
        ),
        "wrapped where model_runner imports it: capture exactly the named layers (patches/layer_ids.py)",
    ),
    Hook(
        "imported",
        "sglang.srt.model_executor.model_runner",
        "configure_aux_hidden_state_capture",
        ("sglang.srt.model_executor.model_runner_components.attention_backend_setup",),
        "the name model_runner calls, so the wrapper is installed there",
    ),
    Hook("field", "sglang.srt.managers.utils", "GenerationBatchResult.logits_output", (), "holds the rows"),
    Hook("callable", "sglang.srt.utils.common", "async_d2h", ("tensor",), "pinned async device-to-host copy"),
    Hook(
        "field",
        "sglang.srt.layers.logits_processor",
        "LogitsProcessorOutput.hidden_states",
        (),
        "aux concat [tokens, 3H] under full capture",
    ),
    Hook(
        "field",
        "sglang.srt.layers.logits_processor",
        "LogitsProcessorOutput.last_hidden_states",
        (),
        "final-norm rows [tokens, H] under aux capture",
    ),
    Hook(
        "field",
        "sglang.srt.model_executor.forward_batch_info",
        "CaptureHiddenMode.FULL",
        (),
        "one row per prompt token",
    ),
    Hook(
        "field",
        "sglang.srt.sampling.sampling_params",
        "SamplingParams.custom_params",
        (),
        "carries the hsx_dump marker and loss mask",
    ),
    Hook("callable", _SB, "Req.finished", ("self",), "aborted requests write nothing"),
    *(
        Hook("attribute", _SB, f"Req.{name}", (), why)
        for name, why in (
            ("rid", "names the dump file"),
            ("origin_input_ids", "the prompt: rows must add up to its length"),
            ("sampling_params", "reach custom_params"),
            ("return_hidden_states", "stock path"),
            ("hidden_states", "stock path"),
            ("inflight_middle_chunks", "> 0 in the hook means a middle prefill chunk"),
            ("is_retracted", "a retracted request starts over"),
            ("retraction_count", "keys chunk buffers so a retried prefill starts clean"),
        )
    ),
    _flag("enable_return_aux_hidden_states", "capture the aux layers without a draft model"),
    _flag("speculative_algorithm", "EAGLE3 names the capture convention"),
    _flag("return_aux_hidden_state_layer_ids", "configurable aux layers"),
    _flag("watchdog_timeout", "the writer never blocks the scheduler near it"),
    *(
        _flag(f, "a layout the launcher refuses (runner/contract/launch.py UNTESTED)")
        for f in (
            "enable_two_batch_overlap",
            "moe_a2a_backend",
            "enable_attn_tp_input_scattered",
            "attn_cp_size",
            "enable_prefill_cp",
            "dcp_size",
        )
    ),
    _flag("return_hidden_states_mode", "must resolve to full"),
    _flag("disable_radix_cache", "a prefix hit would drop rows"),
    _flag("chunked_prefill_size", "-1 turns chunking off; otherwise chunks are reassembled"),
    _flag("disable_overlap_schedule", "optional; both schedules are handled"),
    _flag("pp_size", "aux capture needs pp_size 1"),
    _flag("tp_size", "tensor parallel width"),
    _flag("dp_size", "data parallel replicas"),
    _flag("attn_dp_size", "DP attention is refused (writer rank unconfirmed)"),
    _flag("mem_fraction_static", "runner config"),
    _flag("model_path", "runner config"),
    _flag("host", "runner config"),
    _flag("port", "runner config"),
)


class IncompatibleSGLang(HsxError, RuntimeError):
    """The installed or inspected SGLang is not the one this patch was written for."""


# ---------------------------------------------------------------------------- shared AST helpers


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


# ---------------------------------------------------------------------------- sources (no import)


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


# ---------------------------------------------------------------------------- installed (import)


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
