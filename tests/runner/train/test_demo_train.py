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
from runner.output import verified
from runner.train import preflight, progress
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
    # the extraction's end handed the output to training: verified (the preflight's first check)
    st = json.loads(runner("status", "--json", "--config", conf, check=True).stdout)
    assert st["handoff"] == "features verified for training: `/train start` trains the draft", st
    assert verified.check(cfg.job.out)[0]
    assert _train(conf, "start")["started"]
    deadline = time.monotonic() + 300
    while (st := _train(conf, "status"))["phase"] in ("preflight", "loading", "training"):
        assert time.monotonic() < deadline, st
        time.sleep(0.5)
    assert st["phase"] == "done" and st["step"] == st["total_steps"] == min(
        cfg.train.max_steps, 12 * cfg.train.epochs
    ), st
    assert st["checkpoint_step"] == st["total_steps"] and st["loss"] is not None
    # the preflight's estimate of a checkpoint against SpecForge's own
    with open(work / "out-train" / "draft.json") as f:
        estimate = preflight.checkpoint_bytes(json.load(f))
    ckpt = progress.step_dir(st["output_dir"], st["run_id"], st["checkpoint_step"])
    real = sum(os.path.getsize(os.path.join(ckpt, n)) for n in os.listdir(ckpt))
    assert 0.9 * real <= estimate <= 1.1 * real, (estimate, real)
    rep = _train(conf, "export")
    out = str(work / "out-train" / "export")
    assert (
        rep["ok"] and os.path.getsize(os.path.join(out, "model.safetensors")) > 0 and rep["export_dir"] == out
    )
    with open(os.path.join(out, "config.json")) as f:  # the exported draft reads the extraction's layers
        ids = json.load(f)["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    with open(os.path.join(cfg.job.out, "dataset.json")) as f:
        assert ids == rep["aux_layer_ids"] == json.load(f)["aux_layer_ids"]
    # SGLang 0.5.23's own choice of steps, top-k and draft tokens for a LlamaForCausalLM target
    steps = [
        "--speculative-num-steps",
        "5",
        "--speculative-eagle-topk",
        "4",
        "--speculative-num-draft-tokens",
        "8",
    ]
    eagle = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", out]
    assert rep["flags"] == ["--model-path", cfg.job.model, *eagle, *steps]
    assert f"serve it with: python -m sglang.launch_server --model-path {cfg.job.model} " in rep["message"]
