"""The import rules the README's architecture picture draws, read from the source with ``ast``.

runner.contract is the stdlib leaf every package imports, with no exception; runner.text (the
records' plain text) imports only the stdlib and the contract; runner.codec (the sample file,
GPU-box only) imports the contract, the stdlib, torch, xxhash and ISA-L. Beyond them, runner
never imports bot, patches, remote or deploy, patches imports of runner only the contract and the
codec, remote only the contract and the text, deploy never imports bot, the ops side never
imports the codec, and bot reaches the runner's machinery only for the text and ``hsx demo``
(which runs a runner on this machine). Inside runner the stages are a ladder (data, output, serve,
job, train, measure, regenerate, engines, kinds, pipeline): each imports only the rungs below it. No file imports one that imports it back,
lazily or not, and no module grows past the habit's 450 lines. The tests import no bench code,
but for tests/bench/ (the bench's own tests).
"""

from __future__ import annotations

import ast
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = ("runner", "bot", "remote", "patches", "deploy")
CONTRACT = "runner.contract"
# The sample file and its bytes, GPU-box only: both writers write it (the SGLang patch and the
# reference backend), verify, adopt and the self-test read it. What it may import beyond the
# contract and the stdlib:
CODEC = "runner.codec"
CODEC_DEPS = {"torch", "xxhash", "isal"}
# The records' plain text: the box's CLI and the ops side say the same words.
TEXT = "runner.text"
# Rooms of runner any rung may use, as it may the contract.
ROOMS = (CONTRACT, CODEC, TEXT)
OPS_SIDE = ("bot", "remote", "deploy")  # never torch: never the codec
# bot reaches runner's machinery for `hsx demo` only (it runs a runner here), always lazily.
BOT_DEMO = {"runner.data.demo_assets", "runner.sglang_cpu"}
# runner's stages, lowest first: each may import the contract, the ones before it and itself.
STAGES = (
    "runner.data", "runner.output", "runner.serve", "runner.job", "runner.train", "runner.measure",
    "runner.regenerate", "runner.engines", "runner.kinds", "runner.pipeline",
)  # fmt: skip
# runner's top-level modules a stage may import: leaves that import nothing of ours but the contract.
TOP_LEAVES = {
    "runner.lanes",
    "runner.ports",
    "runner.procs",
    "runner.sglang_cpu",
    "runner.specforge_cpu",
    "runner.specforge_gpu",
}
MAX_TOP = 10  # modules left at runner's top: cli and what truly spans the stages
MAX_LINES = 450
STDLIB = sys.stdlib_module_names | {"__future__", "tomli"}  # tomli: tomllib before Python 3.11


def _modules(pkgs=OURS):
    for pkg in pkgs:
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    yield rel.removesuffix(".__init__"), path, f == "__init__.py"


def _imports(name: str, path: str, is_pkg: bool) -> list[tuple[str, bool]]:
    """(imported module, at module level) for every import in the file, relative ones resolved."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    top = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from runner.contract import dump` imports runner.contract.dump
            names = [f"{mod}.{a.name}" for a in node.names]
            out += [(n, id(node) in top) for n in names] or [(mod, id(node) in top)]
    return out


def _ours(mod: str) -> bool:
    return mod.split(".")[0] in OURS


def _in(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def _known(mod: str) -> str:
    """A `from pkg import name` target: the module when ``name`` is a module, else the package."""
    parts = mod.split(".")
    while parts and not (
        os.path.exists(os.path.join(ROOT, *parts) + ".py") or os.path.isdir(os.path.join(ROOT, *parts))
    ):
        parts.pop()
    return ".".join(parts)


EDGES = [
    (name, _known(mod) if _ours(mod) else mod.split(".")[0], top)
    for name, path, is_pkg in _modules()
    for mod, top in _imports(name, path, is_pkg)
]


def test_the_source_is_what_the_rules_read():
    names = {n for n, _, _ in EDGES}
    assert {
        "runner.cli",
        "runner.contract.status",
        "runner.codec.ckpt",
        "runner.text.extraction",
        "bot.verbs.commands",
        "remote.client",
        "patches.writer",
    } <= names
    assert ("runner.cli", "runner.contract.config", True) in EDGES  # a real edge is seen


def _outside(room: str, ours: tuple[str, ...], others: set[str]) -> list[tuple[str, str]]:
    """The imports of ``room`` that reach past ``ours`` (of our packages) and ``others``."""
    bad = []
    for src, dst, _ in EDGES:
        if not _in(src, room):
            continue
        if _ours(dst):
            if not any(_in(dst, r) for r in ours):
                bad.append((src, dst))
        elif dst not in others:
            bad.append((src, dst))
    return bad


def test_the_contract_is_a_stdlib_leaf():
    bad = _outside(CONTRACT, (CONTRACT,), STDLIB)
    assert not bad, bad


def test_the_text_imports_only_the_stdlib_and_the_contract():
    bad = _outside(TEXT, (CONTRACT, TEXT), STDLIB)
    assert not bad, bad


def test_the_codec_imports_only_the_contract_the_stdlib_torch_xxhash_and_isal():
    bad = _outside(CODEC, (CONTRACT, CODEC), STDLIB | CODEC_DEPS)
    assert not bad, bad


@pytest.mark.parametrize(
    "src, forbidden, allowed",
    [
        ("runner", ("bot", "patches", "deploy", "remote"), ()),
        ("patches", ("runner", "bot", "remote", "deploy"), (CODEC,)),  # the patch writes the sample file
        ("remote", ("runner", "bot", "patches", "deploy"), (TEXT,)),
        ("bot", ("patches",), ()),  # bot.cli wires `hsx deploy` (deploy.install): an allowed arrow
        ("deploy", ("bot",), ()),
    ],
)
def test_forbidden_arrows(src, forbidden, allowed):
    bad = [
        (s, d)
        for s, d, _ in EDGES
        if _in(s, src)
        and not _in(s, CONTRACT)
        and any(_in(d, f) for f in forbidden)
        and not any(_in(d, a) for a in (CONTRACT, *allowed))
    ]
    assert not bad, bad


def test_the_ops_side_never_imports_the_codec():
    bad = [(s, d) for s, d, _ in EDGES if any(_in(s, o) for o in OPS_SIDE) and _in(d, CODEC)]
    assert not bad, bad


def test_bot_reaches_the_runner_only_for_the_text_and_the_demo_lazily():
    bad = [
        (s, d, top)
        for s, d, top in EDGES
        if _in(s, "bot")
        and _in(d, "runner")
        and not any(_in(d, r) for r in (CONTRACT, TEXT))
        and (d not in BOT_DEMO or top)
    ]
    assert not bad, bad


def _stage(mod: str) -> str | None:
    return next((st for st in STAGES if _in(mod, st)), None)


def test_each_stage_imports_only_the_rungs_below_it():
    bad = []
    for src, dst, _ in EDGES:
        st = _stage(src)
        if st is None or not _in(dst, "runner") or any(_in(dst, r) for r in ROOMS) or dst in TOP_LEAVES:
            continue
        allowed = STAGES[: STAGES.index(st) + 1]
        if _stage(dst) not in allowed:
            bad.append((src, dst))
    assert not bad, bad


def test_top_leaves_import_only_the_contract_and_each_other():
    bad = [
        (s, d)
        for s, d, _ in EDGES
        if s in TOP_LEAVES and _ours(d) and not _in(d, CONTRACT) and d not in TOP_LEAVES
    ]
    assert not bad, bad


def test_the_stages_are_all_there_and_runner_top_is_small():
    pkgs = {n for n, _, is_pkg in _modules() if is_pkg}
    assert set(STAGES) <= pkgs
    top = [n for n, _, is_pkg in _modules() if n.count(".") == 1 and n.startswith("runner.") and not is_pkg]
    assert "runner.cli" in top and len(top) <= MAX_TOP, top


def test_each_stage_says_what_it_owns_and_may_import():
    for st in STAGES:
        path = os.path.join(ROOT, *st.split("."), "__init__.py")
        doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read())) or ""
        assert "imports" in doc.lower(), (
            f"{st}: its __init__ docstring says what it owns and what it may import"
        )


def _circles(edges) -> list[list[str]]:
    """Every strongly connected set of two or more files (Tarjan), each a circle of imports."""
    graph: dict[str, set[str]] = {}
    for s, d in edges:
        graph.setdefault(s, set()).add(d)
        graph.setdefault(d, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_a_circle():
    assert _circles([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]) == [["a", "b", "c"]]
    assert _circles([("a", "b"), ("b", "c")]) == []


def test_no_file_imports_one_that_imports_it_back():
    ours = [(s, d) for s, d, _ in EDGES if _ours(d) and s != d]  # lazy and type-only imports count too
    assert not _circles(ours)


def test_the_tests_import_no_bench_code_but_the_bench_s_own():
    """tests/bench/ tests the benchmarks; every other test, fixture and helper stands without
    them (SpecForge's reader, which the bench uses too, is tests/specforge_reader.py)."""
    seen = [(n, mod) for n, path, is_pkg in _modules(("tests",)) for mod, _ in _imports(n, path, is_pkg)]
    bad = [(n, mod) for n, mod in seen if _in(mod, "bench") and not _in(n, "tests.bench")]
    assert not bad, bad
    assert any(_in(mod, "bench") for n, mod in seen if _in(n, "tests.bench"))  # the check can fail


def test_no_module_past_the_habit():
    long = []
    for pkg in (*OURS, "bench"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    with open(path, encoding="utf-8") as fh:
                        n = sum(1 for _ in fh)
                    if n > MAX_LINES:
                        long.append((os.path.relpath(path, ROOT), n))
    assert not long, long


def _unnamed(readme: str) -> list[str]:
    """The product modules the README's map ("What is where") does not name: by its path, its
    file name or, in backticks, its stem."""
    start = readme.index("## What is where")
    text = readme[start : readme.find("\n## ", start + 1)]
    out = []
    for name, path, is_pkg in _modules():
        stem = name.rsplit(".", 1)[-1]
        rel = os.path.relpath(path, ROOT)
        if not is_pkg and f"`{stem}`" not in text and rel not in text and f"{stem}.py" not in text:
            out.append(rel)
    return out


def test_the_readme_map_names_every_module():
    """The map cannot drift: a module added without a word in it fails here."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert not _unnamed(readme), _unnamed(readme)
    assert "runner/lanes.py" in _unnamed(
        readme.replace("runner/lanes.py", "runner/lanes")
    )  # the check can fail


def test_the_contracts_init_names_each_of_its_modules():
    path = os.path.join(ROOT, "runner", "contract", "__init__.py")
    doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read())) or ""
    names = [n.rsplit(".", 1)[1] for n, _, is_pkg in _modules() if n.startswith(CONTRACT + ".")]
    assert names and not [n for n in names if f"``{n}``" not in doc], doc
