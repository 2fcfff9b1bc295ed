"""Shared fixtures: a tiny demo job (real model, real tokenizer), built once per session and
copied per test so each test has its own output, port and config.

The ``slow`` marker (``pytest -m "not slow"`` is the fast lane): a test whose runner process
imports torch carries it in its file; a test on real daemons, the real SGLang CPU lane or a
wheel build gets it here, from the fixture that provides them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from runner.contract import timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
RUNNER = os.path.join(BIN, "hsx-runner")
os.environ[timing.ENV] = "fast"  # short polls and backoffs, here and in every process a test starts


SLOW_FIXTURES = frozenset(
    {"pair", "shared_pair", "gpu_box", "hsx_wheel", "slurm", "slurm_two_nodes", "sglang_python", "specforge"}
)


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)


def free_port(addr: str = "127.0.0.1") -> int:
    """A port free on ``addr`` now: the one helper every test's daemon and server takes its port from."""
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


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
    lines = []
    for section, keys in tables.items():
        lines += [f"[{section}]"] + [f"{k} = {_toml(v)}" for k, v in keys.items()]
    lines += ["[remote]", 'transport = "local"', f'runner = "{RUNNER}"', f'runner_config = "{dest}/hsx.toml"']
    path = os.path.join(dest, "hsx.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    return repr(v)


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
