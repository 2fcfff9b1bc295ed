"""The training preflight, check by check, on real files and real processes (no trainer): each
refusal names what is wrong and the fix. A real verify's kept verdict is in
tests/runner/output/test_output.py; the preflight before a real trainer in test_demo_train.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runner import specforge_cpu
from runner.contract.checks import refusal
from runner.contract.config import from_dict
from runner.contract.errors import ConfigError
from runner.contract.status import Phase, StatusRecord, write_record
from runner.output import verified
from runner.serve import gpus as gpus_mod
from runner.serve import pidfile
from runner.train import preflight, runspec
from tests.conftest import RUNNER, write_config
from tests.runner.helpers import held_box
from tests.runner.train.units import UNIFIED, _fake_python

AUX = [1, 3, 4]
MODEL = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 265, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "rms_norm_eps": 1e-5, "num_hidden_layers": 8,
}  # fmt: skip


def _model(tmp_path, tensors=("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight")):
    m = tmp_path / "model"
    m.mkdir(exist_ok=True)
    (m / "config.json").write_text(json.dumps(MODEL))
    header = {n: {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]} for n in tensors}
    raw = json.dumps(header).encode()
    (m / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 4)
    return m


def _lane(tmp_path) -> str:
    """An interpreter path inside a CPU-lane venv (its shims folder is what marks the lane)."""
    lane = tmp_path / "lane"
    (lane / "bin").mkdir(parents=True, exist_ok=True)
    (lane / specforge_cpu.SHIMS).mkdir(exist_ok=True)
    (lane / specforge_cpu.SHIMS / "sitecustomize.py").write_text(specforge_cpu.SITECUSTOMIZE)
    return str(lane / "bin" / "python")


def _out(tmp_path, files=2, verify=True):
    """A done output: dataset.json, ``files`` feature files and (verify) a verdict kept for them."""
    out = tmp_path / "out"
    (out / "rows_0-2000").mkdir(parents=True, exist_ok=True)
    (out / "dataset.json").write_text(json.dumps({"aux_layer_ids": AUX, "max_length": 64}))
    for i in range(files):
        (out / "rows_0-2000" / f"data_{i}.ckpt").write_bytes(b"x" * 10)
    write_record(str(out / "status.json"), StatusRecord(job="t", phase=Phase.DONE, total=files, done=files))
    if verify:
        _verdict(out, ok=files, total=files)
    return out


def _verdict(out, **report):
    """What verify keeps for the output as it is now."""
    report = {"total": 2, "ok": 2, "quick": False, "missing": [], "corrupt": [], **report}
    verified.save(str(out), report, verified.identity(str(out)))


def _cfg(tmp_path, python="", job=None, cluster=None, **train):
    body = {
        "job": {"model": str(tmp_path / "model"), "dataset": "d.jsonl", "out": str(tmp_path / "out"), **(job or {})},
        "train": {"python": python, **train}, "cluster": cluster or {},
    }  # fmt: skip
    return from_dict(body, base_dir=str(tmp_path))


def _checks(cfg) -> dict[str, dict]:
    _, spec, draft = runspec.plan(cfg)
    return {c["name"]: c for c in preflight.checks(cfg, spec, draft)}


def test_every_check_passes_for_a_verified_output_and_the_cpu_lane(tmp_path):
    _model(tmp_path)
    _out(tmp_path)
    found = _checks(_cfg(tmp_path, _lane(tmp_path)))
    assert all(c["ok"] for c in found.values()), found
    assert refusal("training preflight", list(found.values())) is None
    assert found["features"]["detail"].startswith("2 / 2 sound at ")
    assert found["layers"]["detail"] == "draft and extraction both use aux layers [1, 3, 4]"
    # no GPU here, and the CPU lane needs none: said as it is, not pretended
    assert found["gpus"]["detail"].startswith("the CPU lane trains on no GPU; ")


def test_features_refuse_until_verified_and_again_after_any_change(tmp_path):
    out = _out(tmp_path, verify=False)
    ok, detail, fix = verified.check(str(out))
    assert not ok and detail.startswith("no verify result kept in") and "hsx-runner verify" in fix
    _verdict(out)
    assert verified.check(str(out))[0]
    (out / "rows_0-2000" / "data_2.ckpt").write_bytes(b"y")  # the extraction wrote one more
    ok, detail, fix = verified.check(str(out))
    assert not ok and "changed since the last verify" in detail and "2 → 3 feature files" in detail
    assert fix.endswith("again")
    _verdict(out, total=3, ok=3, quick=True)
    ok, detail, _ = verified.check(str(out))
    assert not ok and "was --quick" in detail
    _verdict(out, total=3, ok=2, corrupt=[1])
    ok, detail, fix = verified.check(str(out))
    assert not ok and "found 2 / 3 sound (1 corrupt)" in detail and "--repair" in fix
    (out / ".hidden").mkdir()
    (out / ".hidden" / "extra.ckpt").write_bytes(b"z")  # SpecForge walks the whole tree
    _verdict(out, total=3, ok=3)
    ok, detail, fix = verified.check(str(out))
    assert not ok and "4 feature files" in detail and "verify found 3 samples" in detail


def test_layers_are_those_of_the_draft_run_yaml_points_at(tmp_path):
    _model(tmp_path)
    _out(tmp_path)
    theirs = tmp_path / "mine.json"
    theirs.write_text(json.dumps({**MODEL, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}}))
    cfg = _cfg(
        tmp_path, _lane(tmp_path), job={"draft_config": str(theirs)}
    )  # its own ids, not the extraction's
    c = _checks(cfg)["layers"]
    draft = tmp_path / "out-train" / "draft.json"  # what the start would write from it
    assert not c["ok"] and f"the draft config {draft} names aux layers [1, 3, 5]" in c["detail"]
    assert "the extraction's are [1, 3, 4]" in c["detail"] and str(draft) in c["fix"]
    # [job] draft_config: the operator's own draft is the one trained, given the extraction's ids
    own = tmp_path / "own.json"
    own.write_text(
        json.dumps({**MODEL, "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": 100})
    )
    cfg = _cfg(tmp_path, _lane(tmp_path), job={"draft_config": str(own)})
    _, spec, draft = runspec.plan(cfg)
    assert (
        draft["draft_vocab_size"] == 100 and draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == AUX
    )
    assert _checks(cfg)["layers"]["ok"]


def test_the_target_needs_both_keys_and_an_operator_may_name_them(tmp_path):
    _model(tmp_path, ("model.embed_tokens.weight", "model.norm.weight"))  # tied: no lm_head.weight
    _out(tmp_path)
    c = _checks(_cfg(tmp_path, _lane(tmp_path)))["target"]
    assert not c["ok"] and "has no lm_head tensor (*lm_head.weight)" in c["detail"]
    assert "lm_head_key" in c["fix"] and "tied embeddings" in c["fix"]
    keys = {"model": {"lm_head_key": "model.embed_tokens.weight"}}
    assert _checks(_cfg(tmp_path, _lane(tmp_path), specforge=keys))["target"]["ok"]
    keys = {"model": {"embedding_key": "nope"}}
    c = _checks(_cfg(tmp_path, _lane(tmp_path), specforge=keys))["target"]
    assert not c["ok"] and "no embedding key 'nope' and no lm_head tensor" in c["detail"]
    (tmp_path / "model" / "model.safetensors.index.json").write_text("{")  # torn: a refusal, no traceback
    with pytest.raises(ConfigError, match=r"the target's weights in .* are unreadable \(JSONDecodeError"):
        runspec.plan(_cfg(tmp_path, _lane(tmp_path)))


def test_the_disk_must_hold_max_checkpoints_plus_one_estimated_from_the_draft(tmp_path):
    _model(tmp_path)
    _out(tmp_path)
    cfg = _cfg(tmp_path, _lane(tmp_path), save_interval=1)
    _, spec, draft = runspec.plan(cfg)
    each = preflight.checkpoint_bytes(draft)
    assert each == preflight.draft_params(draft) * 14 + 265 + 8 * 265
    c = preflight.disk(spec, draft, total_steps=10)
    assert c["ok"] and "3 more to hold" in c["detail"] and "trainable parameters × 14 bytes" in c["detail"]
    for step in (1, 2):  # two kept already: one more at the next save, before the rotation
        d = tmp_path / "out-train" / "output" / f"{runspec.RUN_ID}-step{step}"
        d.mkdir(parents=True)
    assert "1 more to hold" in preflight.disk(spec, draft, total_steps=10)["detail"]
    huge = {**draft, "hidden_size": 2_000_000, "intermediate_size": 8_000_000}
    c = preflight.disk(spec, huge, total_steps=10)
    assert not c["ok"] and "free at" in c["detail"] and "TB" in c["detail"] and "max_checkpoints" in c["fix"]


def test_gpus_held_by_the_extractions_server_or_a_stranger_refuse_by_name(tmp_path, monkeypatch):
    out = _out(tmp_path)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        pidfile.write(str(out / "server.pid"), server.pid)
        c = preflight.gpus(_lane(tmp_path), str(out))
        assert (
            not c["ok"]
            and c["detail"] == f"the extraction's server (pid {server.pid}, server.pid) still runs"
        )
        assert "hsx-runner stop" in c["fix"]
    finally:
        server.kill()
        server.wait()
    assert preflight.gpus(_lane(tmp_path), str(out))["ok"]  # gone: its stale file proves nothing
    held_box(tmp_path, monkeypatch, {"vllm.service": 2})
    c = preflight.gpus("/opt/specforge/bin/python", str(out))  # a GPU trainer
    assert not c["ok"] and "vllm.service" in c["detail"] and "free-gpus" in c["fix"]
    c = preflight.gpus(_lane(tmp_path), str(out))  # the CPU lane uses none of them
    assert c["ok"] and "vllm.service" in c["detail"]


def test_only_the_gpus_the_trainer_uses_are_checked_and_too_few_refuse(tmp_path, monkeypatch):
    """SpecForge's launcher puts [train] gpus ranks on the first GPUs (or CUDA_VISIBLE_DEVICES')."""
    out = _out(tmp_path)
    stub = tmp_path / "nvml.json"
    stranger = {"pid": 9001, "used_mib": 70_000, "comm": "python3", "cgroup": "0::/user.slice\n"}
    free = {"used_mib": 0, "procs": []}
    stub.write_text(json.dumps({"gpus": [free, free, {"used_mib": 70_000, "procs": [stranger]}]}))
    monkeypatch.setenv(gpus_mod.STUB_ENV, str(stub))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu = "/opt/specforge/bin/python"
    assert preflight.gpus(gpu, str(out), 2)["ok"]  # GPU 2 is held, and not the trainer's
    c = preflight.gpus(gpu, str(out), 3)
    assert not c["ok"] and "9001" in c["detail"]
    c = preflight.gpus(gpu, str(out), 4)
    assert (
        not c["ok"] and c["detail"] == "[train] gpus = 4, and NVML sees 3 GPUs" and "[train] gpus" in c["fix"]
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    assert not preflight.gpus(gpu, str(out), 2)["ok"]  # the visible ones are 1 and 2: 2 is held
    c = preflight.gpus(gpu, str(out), 3)
    assert not c["ok"] and c["detail"] == "[train] gpus = 3, and CUDA_VISIBLE_DEVICES=1,2 leaves 2 GPUs"
    _model(tmp_path)
    slurm = _checks(_cfg(tmp_path, gpu, cluster={"engine": "slurm"}, gpus=8))["gpus"]
    assert slurm["ok"] and "Slurm" in slurm["detail"]  # this host's GPUs are not the job's


def test_train_start_refuses_unverified_features_and_writes_nothing(tmp_path):
    _model(tmp_path)
    _out(tmp_path, verify=False)
    py = _fake_python(tmp_path, "sf", "0.2.0", UNIFIED)
    conf = tmp_path / "hsx.toml"
    write_config(conf, job={"model": "model", "dataset": "d.jsonl", "out": "out"}, train={"python": py})
    p = subprocess.run([RUNNER, "train", "start", "--json", "--config", str(conf)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    rep = json.loads(p.stdout)
    assert p.returncode == 3 and not rep["started"], p.stdout + p.stderr
    assert rep["reason"].startswith(
        f"training preflight: features: no verify result kept in {tmp_path / 'out'}"
    )
    assert "fix: run hsx-runner verify" in rep["reason"]
    assert [c["name"] for c in rep["checks"]] == ["features"]  # refused before any venv is built
    assert not os.path.exists(tmp_path / "out-train")  # a refused start writes nothing
