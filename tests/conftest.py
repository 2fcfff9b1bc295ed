"""Shared fixtures: a tiny demo job (real model, real tokenizer), built once per session and
copied per test so each test has its own output, port and config.

The ``slow`` marker (``pytest -m "not slow"`` is the fast lane): a test whose runner process
imports torch carries it in its file; a test on real daemons, the real SGLang CPU lane or a
wheel build gets it here, from the fixture that provides them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from runner.contract import timing
from runner.ports import free_port
from tests import sshd

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
RUNNER = os.path.join(BIN, "hsx-runner")
os.environ[timing.ENV] = "fast"  # short polls and backoffs, here and in every process a test starts
pytest_plugins = ["tests.times"]  # --times=PATH: what each test costs, by lane and module


class Patience:
    """The status answer's wait lifted (``HSX_TIMING=patient``, here and in every process the test
    starts), for a test of what an answer says rather than of its 4 s bound (test_status_answer's):
    on a starved machine the first answer took past it and was the last record seen, none yet.
    ``bounded()`` restores the product's bound for the reads after it."""

    bound = timing.FAST

    def __init__(self, monkeypatch):
        self._mp = monkeypatch
        monkeypatch.setenv(timing.ENV, "patient")

    def bounded(self) -> None:
        self._mp.setenv(timing.ENV, "fast")


@pytest.fixture
def patient(monkeypatch) -> Patience:
    return Patience(monkeypatch)


SLOW_FIXTURES = frozenset(
    {"pair", "shared_pair", "gpu_box", "hsx_wheel", "slurm", "slurm_two_nodes", "sglang_python", "specforge"}
)


def pytest_collection_modifyitems(items):
    for item in items:
        if any(_starts(item, name) for name in SLOW_FIXTURES.intersection(item.fixturenames)):
            item.add_marker(pytest.mark.slow)
    # Costliest modules first: with -n 3 --dist loadfile each worker takes the next module as it
    # frees, so the long ones start early and the short ones fill in at the end (stable sort:
    # a module's tests keep their order).
    from tests import times

    cost = times.module_costs()
    items.sort(key=lambda item: -cost.get(item.nodeid.split("::")[0], _unknown_cost(item)))


def _unknown_cost(item) -> float:
    """A module not in tests/costs.json yet: a guess by lane, until the next --times run."""
    return 30.0 if item.get_closest_marker("slow") else 1.0


def _starts(item, name: str) -> bool:
    """Whether ``name`` is, for this test, the conftest fixture that starts a real thing: a
    parametrize argument or a test module's own stub of the same name starts nothing."""
    defs = item._fixtureinfo.name2fixturedefs.get(name) or ()
    return bool(defs) and defs[-1].func.__module__.endswith("conftest")


@pytest.fixture(scope="module")
def shared_pair(tmp_path_factory):
    """One jump + target for tests that leave the daemons as they found them."""
    sshd.need_sshd()
    with sshd.two_hop(str(tmp_path_factory.mktemp("sshd"))) as pair:
        yield pair


@pytest.fixture
def pair(tmp_path):
    """A fresh jump + target for a test that kills, pauses or re-keys them."""
    sshd.need_sshd()
    with sshd.two_hop(str(tmp_path / "sshd")) as p:
        yield p


@pytest.fixture(scope="session")
def specforge(tmp_path_factory):
    """SpecForge's own ``specforge.data.preprocessing`` (discovery and offline loader), from the
    pinned wheel scripts/test.sh fetches; CI sets HSX_REQUIRE_SPECFORGE=1 to fail, not skip."""
    from tests import specforge_reader as sf
    from tests.sshd import skip_or_fail

    whl = sf.wheel(os.path.join(ROOT, ".cache"))
    if whl is None:
        skip_or_fail(f"no SpecForge {sf.VERSION} wheel under .cache/{sf.CACHE}", "HSX_REQUIRE_SPECFORGE")
    try:
        return sf.load_specforge(sf.unpack(whl, str(tmp_path_factory.mktemp("specforge"))))
    except ImportError as e:
        skip_or_fail(f"SpecForge's reader does not import here ({e})", "HSX_REQUIRE_SPECFORGE")


@pytest.fixture(scope="session")
def demo_assets(tmp_path_factory):
    """Model, tokenizer and a 300-row dataset from seed 0."""
    from runner.data import demo_assets as da

    d = tmp_path_factory.mktemp("assets")
    da.build(str(d), 300, 0)
    return d


def write_job(dest, assets, samples: int | None = None, **overrides) -> str:
    """A job dir using the shared model; dataset = first `samples` rows of the assets'. Each
    override is ``section__key=value`` (``job__retries=1``, ``train__python=...``)."""
    dest = str(dest)
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(assets, "data.jsonl")) as f:
        rows = f.readlines()
    rows = rows[:samples] if samples else rows
    with open(os.path.join(dest, "data.jsonl"), "w") as f:
        f.writelines(overrides.pop("rows", rows))
    job = {
        "name": "test", "model": os.path.join(str(assets), "model"), "dataset": "data.jsonl", "out": "out",
        "max_length": 256, "concurrency": 4, "status_interval_s": 0.3, "rate_window_s": 30.0,
        "max_consecutive_failures": 10, "retries": 3,
    }  # fmt: skip
    server = {
        "backend": "reference",
        "threads": 1,
        "port": free_port(),
        "start_timeout_s": 120.0,
        "max_restarts": 3,
    }
    tables = {"job": job, "server": server}
    for k, v in overrides.items():  # section__key: any section ([train], [cluster], ...), not just two
        section, _, key = k.partition("__")
        assert key, f"write_job: {k!r} is not section__key"
        tables.setdefault(section, {})[key] = v
    path = os.path.join(dest, "hsx.toml")
    remote = {"transport": "local", "runner": RUNNER, "runner_config": path}
    tables["remote"] = {**remote, **tables.get("remote", {})}  # a remote__ override wins
    return write_config(path, **tables)


def write_config(path, **sections) -> str:
    """A TOML config at ``path``, a ``[section]`` a keyword in the order given, each a dict of
    keys: ``write_config(p, job={"model": "m", ...}, train={"python": py})``; a dotted table as
    ``**{"train.specforge.training": {...}}``. Values: str (or a path), bool, int, float, and
    lists and dicts (inline tables) of those. Returns the path."""
    lines = []
    for section, keys in sections.items():
        assert re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*", section), f"write_config: [{section}]"
        lines += [f"[{section}]"] + [f"{_key(k)} = {_toml(v)}" for k, v in keys.items()]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def read_config(path) -> dict:
    """A config's sections as TOML reads them: to write one again with more (write_config)."""
    with open(path, "rb") as f:
        return tomllib.load(f)


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml(k)


def _toml(v) -> str:
    """``v`` as a TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        return repr(float(v))  # 0.3, 1e-05, inf, -inf, nan: each a TOML float
    if isinstance(v, (str, os.PathLike)):
        # JSON's escapes are TOML's; DEL, which JSON leaves bare, TOML wants escaped
        return json.dumps(os.fspath(v), ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML value for {v!r}")


def runner(*args, timeout=300, check=False) -> subprocess.CompletedProcess:
    p = subprocess.run([RUNNER, *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"hsx-runner {args} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture
def job(tmp_path, demo_assets):
    """Factory: job(samples=N, **overrides) -> config path."""

    def make(samples=40, **kw):
        return write_job(tmp_path / f"job{len(os.listdir(tmp_path))}", demo_assets, samples, **kw)

    return make


def copy_tree(src, dst):
    shutil.copytree(src, dst, dirs_exist_ok=True)


def specforge_train_python() -> str:
    """SpecForge's trainer on this CPU (its venv under .cache/, built by scripts/test.sh): its
    python, or the test skipped (failed where CI sets HSX_REQUIRE_SPECFORGE_TRAIN=1)."""
    from runner import specforge_cpu

    py = specforge_cpu.python_of(os.path.join(ROOT, ".cache"))
    if py is None:
        sshd.skip_or_fail(
            "no SpecForge CPU venv (python -m runner.specforge_cpu .cache)", "HSX_REQUIRE_SPECFORGE_TRAIN"
        )
    return py
