"""The demo as a new user trains it: `hsx demo`, then `hsx-runner train start`, status until done,
and `train export`, all real (the demo's `[train]` names the SpecForge CPU lane's python), with
3 of its 12 samples held out for SpecForge's eval (`[train] eval_samples`)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from runner import specforge_cpu
from runner.contract.config import load
from runner.contract.train import TrainRecord
from runner.output import verified
from runner.text.training import render_train
from runner.train import preflight, progress, split
from tests.conftest import BIN, ROOT, runner, specforge_train_python
from tests.runner.helpers import train_status, until

pytestmark = pytest.mark.slow
SAMPLES, HELD = 12, 3


def _train(conf, action, code=0) -> dict:
    p = runner("train", action, "--json", "--config", conf, timeout=600)
    assert p.returncode == code, f"train {action} -> {p.returncode}\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout)


def test_the_demo_trains_its_draft_to_the_end_and_exports_it(tmp_path):
    specforge_train_python()
    work = tmp_path / "d"
    p = subprocess.run([os.path.join(BIN, "hsx"), "demo", "--stages", "extract", "--workdir", str(work), "--samples", str(SAMPLES),
                        "--headless"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    conf = str(work / "hsx.toml")
    text = open(conf).read()
    with open(conf, "w") as f:
        f.write(text.replace("\n[train]", f"\n[train]\neval_samples = {HELD}\nmeasure_at_end = true", 1))
    cfg = load(conf)
    assert cfg.train.eval_samples == HELD
    assert cfg.train.python == os.path.join(
        specforge_cpu.venv_dir(os.path.join(ROOT, ".cache")), "bin", "python"
    )
    # the extraction's end handed the output to training: verified (the preflight's first check)
    st = json.loads(runner("status", "--json", "--config", conf, check=True).stdout)
    assert st["handoff"] == "features verified for training: `/train start` trains the draft", st
    assert verified.check(cfg.job.out)[0]
    assert _train(conf, "start")["started"]
    running = ("preflight", "loading", "training")
    st = until(
        lambda: train_status(conf),
        lambda st: st["phase"] not in running,
        300,
        0.5,
        "the end",
    )
    # only the training files count: 9 samples x 3 epochs = 27 steps, an eval at the step-20 save
    total = min(cfg.train.max_steps, (SAMPLES - HELD) * cfg.train.epochs)
    assert st["phase"] == "done" and st["step"] == st["total_steps"] == total, st
    assert st["checkpoint_step"] == st["total_steps"] and st["loss"] is not None and st["checkpoint_at"]
    # the end exported the draft before it said done, and says how SGLang serves it
    exported = os.path.join(str(work / "out-train" / "export"), "model.safetensors")
    assert st["export_ok"] and os.path.getsize(exported) > 0, st
    assert "serve it with: python -m sglang.launch_server" in st["export"]
    # [train] measure_at_end ran `hsx-runner measure start`: the demo's reference backend is not SGLang
    assert st["measure_ok"] is False and st["measure"].startswith(
        "measurement not started (measure_at_end): "
    ), st
    assert '[server] backend must be "sglang"' in st["measure"]
    assert st["measure"] in render_train(TrainRecord.from_dict(st))
    run = work / "out-train"
    _the_split_is_disjoint_and_covers_the_samples(str(work / "out"), str(run))
    evals = [ln for ln in open(run / "train.log") if "'eval/simulated_acc_len'" in ln]
    assert len(evals) == total // cfg.train.save_interval, evals  # SpecForge's own eval lines
    assert st["eval_step"] == cfg.train.save_interval and st["eval_samples"] == HELD
    assert 0 <= st["val_acc"] <= 1 and st["acc_len"] >= 0 and st["best_acc_len"] == st["acc_len"]
    assert st["log_interval"] == cfg.train.log_interval and st["log_s"] > 0
    # every step's acc logged (the demo's log_interval 1), said as a running mean beside the start's
    assert st["acc_logged"] == total // cfg.train.log_interval and 0 <= st["acc_start"] <= 1
    assert 0 <= st["acc_mean"] <= 1 and f"(from {100 * st['acc_start']:.1f}%)" in render_train(
        TrainRecord.from_dict(st)
    )
    # hsx-runner train status says the same two figures on its one line
    line = runner("train", "status", "--config", conf, check=True).stdout
    assert f"acc {100 * st['acc_mean']:.1f}% (from {100 * st['acc_start']:.1f}%)" in line, line
    said = render_train(TrainRecord.from_dict(st))
    assert f"val acc {100 * st['val_acc']:.1f}% · simulated accept length ~{st['acc_len'] + 1:.2f}" in said, (
        said
    )
    h = _train(conf, "history")
    want = list(range(cfg.train.log_interval, total + 1, cfg.train.log_interval))
    assert [p["step"] for p in h["points"]] == want and all(p["launch"] == 1 for p in h["points"])
    assert h["evals"] == [
        {"step": st["eval_step"], "val_acc": st["val_acc"], "acc_len": st["acc_len"], "launch": 1}
    ]
    assert h["marks"] == [{"step": total, "kind": "done", "launch": 1}]
    # the preflight's estimate of a checkpoint against SpecForge's own
    with open(work / "out-train" / "draft.json") as f:
        estimate = preflight.checkpoint_bytes(json.load(f))
    ckpt = progress.step_dir(st["output_dir"], st["run_id"], st["checkpoint_step"])
    real = sum(os.path.getsize(os.path.join(ckpt, n)) for n in os.listdir(ckpt))
    assert 0.9 * real <= estimate <= 1.1 * real, (estimate, real)
    assert st["run_bytes"] >= real and st["disk_free"] > 0 and os.path.ismount(st["disk_path"])
    assert f"run dir {run}: " in said
    rep = _train(conf, "export")  # again, by hand: the same files anew
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


def _the_split_is_disjoint_and_covers_the_samples(out, run):
    """features/ (what SpecForge trains on) and eval/ link every sample once between them, as
    split.json says; the training tree holds no held-out file."""

    def linked(tree):
        got = split.sample_files(tree)
        assert all(os.path.islink(os.path.join(tree, f)) for f in got)
        return {os.path.realpath(os.path.join(tree, f)) for f in got}

    train, held = linked(os.path.join(run, "features")), linked(os.path.join(run, "eval"))
    every = {os.path.realpath(os.path.join(out, f)) for f in split.sample_files(out)}
    assert len(every) == SAMPLES and len(held) == HELD and not train & held and train | held == every
    saved = json.load(open(os.path.join(run, "split.json")))
    assert {os.path.realpath(os.path.join(out, f)) for f in saved["eval"]} == held
    assert len(saved["train"]) == SAMPLES - HELD
    spec = json.load(open(os.path.join(run, "run.yaml")))
    assert spec["data"]["hidden_states_path"] == os.path.join(run, "features")
    assert spec["data"]["eval_hidden_states_path"] == os.path.join(run, "eval")
