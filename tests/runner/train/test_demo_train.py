"""The demo as a new user trains it: `hsx demo`, then `hsx-runner train start`, status until done,
and `train export`, all real (the demo's `[train]` names the SpecForge CPU lane's python)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from runner import specforge_cpu
from runner.contract.config import load
from tests.conftest import BIN, ROOT, runner
from tests.sshd import skip_or_fail

pytestmark = pytest.mark.slow


def _train(conf, action, code=0) -> dict:
    p = runner("train", action, "--json", "--config", conf, timeout=600)
    assert p.returncode == code, f"train {action} -> {p.returncode}\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout)


def test_the_demo_trains_its_draft_to_the_end_and_exports_it(tmp_path):
    if specforge_cpu.python_of(os.path.join(ROOT, ".cache")) is None:
        skip_or_fail(
            "no SpecForge CPU venv (python -m runner.specforge_cpu .cache)", "HSX_REQUIRE_SPECFORGE_TRAIN"
        )
    work = tmp_path / "d"
    p = subprocess.run([os.path.join(BIN, "hsx"), "demo", "--workdir", str(work), "--samples", "12", "--headless"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    conf = str(work / "hsx.toml")
    cfg = load(conf)
    assert cfg.train.python == os.path.join(
        specforge_cpu.venv_dir(os.path.join(ROOT, ".cache")), "bin", "python"
    )
    assert _train(conf, "start")["started"]
    deadline = time.monotonic() + 300
    while (st := _train(conf, "status"))["phase"] in ("preflight", "loading", "training"):
        assert time.monotonic() < deadline, st
        time.sleep(0.5)
    assert st["phase"] == "done" and st["step"] == st["total_steps"] == min(
        cfg.train.max_steps, 12 * cfg.train.epochs
    ), st
    assert st["checkpoint_step"] == st["total_steps"] and st["loss"] is not None
    rep = _train(conf, "export")
    assert rep["ok"] and os.path.getsize(os.path.join(rep["export_dir"], "model.safetensors")) > 0
    assert rep["export_dir"] == str(work / "out-train" / "export")
