"""The trainer's interpreter (runner/train/interpreter.py and the lanes): `[train] python`, `auto`, the unified runtime's check, a build that cannot install."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from runner import specforge_cpu, specforge_gpu
from runner.serve import gpus
from runner.train import control, interpreter
from tests.conftest import RUNNER, write_config

from .units import UNIFIED, _cfg, _fake_python, _nvml


@pytest.mark.parametrize(
    "version,cli,why",
    [
        ("0.2.0", None, "no SpecForge unified runtime (specforge.cli)"),
        ("0.2.0", "def main(argv=None):\n    raise SystemExit(2)  # no train command\n", "legacy"),
        ("0.1.9", UNIFIED, "hsx trains with 0.2.0"),
    ],
)
def test_setup_refuses_an_interpreter_without_the_unified_runtime_and_says_why(tmp_path, version, cli, why):
    py = _fake_python(tmp_path, "sf", version, cli)
    (tmp_path / "out").mkdir()
    write_config(
        tmp_path / "hsx.toml", job={"model": "m", "dataset": "d.jsonl", "out": "out"}, train={"python": py}
    )
    p = subprocess.run([RUNNER, "train", "setup", "--json", "--config", str(tmp_path / "hsx.toml")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    rep = json.loads(p.stdout)
    assert p.returncode == 1 and not rep["ok"] and why in rep["reason"], p.stdout + p.stderr
    good = _fake_python(tmp_path, "ok", "0.2.0", UNIFIED)
    assert control.check_python(good) is None


def test_only_a_lane_path_is_built_on_first_use(tmp_path, monkeypatch):
    lane = os.path.join(specforge_cpu.venv_dir(str(tmp_path)), "bin", "python")
    gpu = os.path.join(specforge_gpu.venv_dir(str(tmp_path)), "bin", "python")
    assert specforge_cpu.root_of(lane) == str(tmp_path) and specforge_gpu.root_of(gpu) == str(tmp_path)
    assert specforge_cpu.root_of("/usr/bin/python3") is None and specforge_cpu.root_of(gpu) is None
    assert specforge_cpu.root_of(str(tmp_path / "specforge-cpu-000000000000" / "bin" / "python")) is None
    built = []
    monkeypatch.setattr(specforge_cpu, "build", lambda root, say: built.append(("cpu", root)))
    monkeypatch.setattr(specforge_gpu, "build", lambda root, say: built.append(("gpu", root)))
    for python in ("/usr/bin/python3", lane, gpu):
        interpreter.ensure(python, say=lambda m: None)
    assert built == [("cpu", str(tmp_path)), ("gpu", str(tmp_path))]


def test_auto_is_specforges_own_pins_where_a_gpu_is_seen_and_the_cpu_lane_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv(gpus.STUB_ENV, _nvml(tmp_path, 2))
    py = interpreter.resolve("auto", str(tmp_path))
    assert py == os.path.join(specforge_gpu.venv_dir(str(tmp_path)), "bin", "python")
    assert specforge_cpu.shims_of(py) is None  # no CPU shim reaches the GPU lane's trainer
    ((what, argv),) = specforge_gpu.steps("PY")
    # its own pins, from the lock: no --no-deps, no CPU torch; each file hash-checked, wheels only
    assert argv == [
        "PY",
        "-m",
        "pip",
        "install",
        "--require-hashes",
        "--only-binary",
        ":all:",
        "-r",
        argv[-1],
    ]
    assert argv[-1].endswith("specforge-gpu.lock") and "specforge==0.2.0 \\" in open(argv[-1]).read()
    monkeypatch.setenv(gpus.STUB_ENV, _nvml(tmp_path, 0))
    assert interpreter.resolve("auto", str(tmp_path)) == os.path.join(
        specforge_cpu.venv_dir(str(tmp_path)), "bin", "python"
    )
    assert interpreter.resolve("/opt/sf/bin/python", str(tmp_path)) == "/opt/sf/bin/python"
    assert _cfg(tmp_path, python="auto", envs_dir="envs").train.envs_dir == str(tmp_path / "envs")


@pytest.mark.slow  # a venv built (ensurepip)
def test_a_gpu_boxs_setup_that_cannot_install_says_which_step_and_is_not_taken_for_built(tmp_path):
    """The registry out of reach: train setup answers why (the step, pip's exit), leaves no
    marker (so the next setup builds it anew); the JSON answer is not mixed with pip's output."""
    cfg = tmp_path / "hsx.toml"
    write_config(
        cfg,
        job={"model": "m", "dataset": "d.jsonl", "out": "out"},
        train={"python": "auto", "envs_dir": "envs"},
    )
    links = tmp_path / "nothing"
    links.mkdir()
    env = {**os.environ, gpus.STUB_ENV: _nvml(tmp_path, 1), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links)}
    p = subprocess.run([RUNNER, "train", "setup", "--json", "--config", str(cfg)], capture_output=True,
                       text=True, env=env, timeout=300)  # fmt: skip
    got = json.loads(p.stdout)
    assert p.returncode == 1 and got["ok"] is False, (p.stdout, p.stderr)
    venv = specforge_gpu.venv_dir(str(tmp_path / "envs"))
    assert got["python"] == os.path.join(venv, "bin", "python")
    assert "step 2/2 (specforge 0.2.0 with its own pins" in got["reason"] and "exit 1" in got["reason"]
    assert "No matching distribution found for " in p.stderr  # pip's own words, on stderr
    assert specforge_gpu.python_of(str(tmp_path / "envs")) is None  # never taken for built
