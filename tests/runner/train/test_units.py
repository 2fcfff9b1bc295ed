"""The training stage's parts that need no trainer: step lines, checkpoint completeness, the
[train] config, the run dir's files, the record's crash rule and the interpreter check (real
files, real processes; SpecForge's own run is tests/runner/train/test_specforge.py)."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys

import pytest

from runner import specforge_cpu, specforge_gpu
from runner.contract.config import from_dict
from runner.contract.errors import ConfigError
from runner.output.lock import JobLock
from runner.serve import gpus
from runner.train import control, exporter, interpreter, progress, record, runspec
from tests.conftest import RUNNER


def test_step_line_with_nan_and_inf_is_parsed_never_evaluated(tmp_path):
    step, m = progress.parse_step(
        "step 12: {'loss': nan, 'acc': 0.5, 'grad_norm': inf, 'x': -inf, 'lr': -1e-4}"
    )
    assert step == 12 and math.isnan(m["loss"]) and m["acc"] == 0.5 and m["grad_norm"] == math.inf
    assert m["x"] == -math.inf and m["lr"] == -1e-4
    planted = tmp_path / "planted"
    line = f"step 1: {{'loss': __import__('os').mkdir({str(planted)!r})}}"
    assert progress.parse_step(line) is None and not planted.exists()
    assert progress.parse_step("step 3: {'loss': 1.0") is None  # cut short
    assert progress.parse_step("[rank0] loading target head") is None
    assert progress.number(math.nan) is None and progress.number(2) == 2.0


def _ckpt(out, step, files):
    d = out / f"hsx-eagle3-step{step}"
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_bytes(b"x")
    return d


def test_a_checkpoint_counts_only_with_every_ranks_file_and_no_tmp(tmp_path):
    out = tmp_path / "output"
    _ckpt(out, 10, ["training_state.pt", "training_state_rank0.pt", "training_state_rank1.pt"])
    _ckpt(out, 20, ["training_state.pt", "training_state_rank0.pt"])  # rank 1 still writing
    _ckpt(out, 30, ["training_state.pt", "training_state_rank0.pt", "training_state_rank1.pt.tmp"])
    synced: set[int] = set()
    assert progress.checkpoints(str(out), "hsx-eagle3") == [10, 20, 30]
    assert progress.durable(str(out), "hsx-eagle3", 2, synced) == 10 and synced == {10}
    assert progress.durable(str(out), "hsx-eagle3", 1, set()) == 20  # one rank: 20 is whole


def _cfg(tmp_path, **train):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    body = {"job": {"model": str(tmp_path / "model"), "dataset": "d.jsonl", "out": str(out)}, "train": train}
    return from_dict(body, base_dir=str(tmp_path))


def test_train_config_defaults_keep_a_crash_from_losing_everything(tmp_path):
    t = _cfg(tmp_path).train
    assert t.save_interval > 0 and t.max_checkpoints >= 2 and t.log_interval <= 10
    for bad in ({"save_interval": 0}, {"max_checkpoints": 1}, {"specforge": 3}, {"epoch": 2}):
        with pytest.raises(ConfigError):
            _cfg(tmp_path, **bad)
    cfg = _cfg(tmp_path, run_dir="runs/a", python="venv/bin/python")
    assert cfg.train.run_dir == str(tmp_path / "runs/a") and cfg.train.python == str(
        tmp_path / "venv/bin/python"
    )
    assert runspec.run_dir(_cfg(tmp_path)) == str(tmp_path / "out-train")  # beside out, never inside


def _model(tmp_path, index=False):
    """A target dir as the demo's: config.json and one safetensors file (a real header)."""
    m = tmp_path / "model"
    m.mkdir(exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 265, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 128, "rms_norm_eps": 1e-5, "num_hidden_layers": 8}  # fmt: skip
    (m / "config.json").write_text(json.dumps(cfg))
    header = {n: {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}
              for n in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight")}  # fmt: skip
    raw = json.dumps(header).encode()
    (m / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 4)
    return m


def test_the_run_dir_holds_a_target_view_with_an_index_and_a_draft_with_the_extractions_layers(tmp_path):
    _model(tmp_path)
    cfg = _cfg(tmp_path, save_interval=5, specforge={"training": {"ttt_length": 3}})
    (tmp_path / "out" / "dataset.json").write_text(
        json.dumps({"aux_layer_ids": [1, 3, 4], "max_length": 256})
    )
    paths, spec = runspec.prepare(cfg)
    index = json.load(open(os.path.join(paths.target, "model.safetensors.index.json")))
    assert index["weight_map"]["lm_head.weight"] == "model.safetensors"
    assert os.path.islink(os.path.join(paths.target, "model.safetensors"))
    assert not os.listdir(tmp_path / "model") == os.listdir(paths.target)  # the model dir is untouched
    draft = json.load(open(paths.draft))
    assert draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert draft["hidden_size"] == 64 and draft["architectures"] == ["LlamaForCausalLMEagle3"]
    written = json.load(open(paths.yaml))
    assert written == spec and spec["model"]["target_model_path"] == paths.target
    assert spec["model"]["embedding_key"] == "model.embed_tokens.weight" and spec["data"]["max_length"] == 256
    assert spec["training"]["ttt_length"] == 3 and spec["training"]["save_interval"] == 5  # operator's last
    assert spec["training"]["max_checkpoints"] == 2 and spec["run_id"] == "hsx-eagle3"
    assert spec["data"]["hidden_states_path"] == str(tmp_path / "out")


def test_an_active_record_whose_supervisor_is_gone_reads_crashed(tmp_path):
    rec = record.Record(str(tmp_path), {"phase": "training", "step": 4})
    rec.write()
    lock = JobLock(str(tmp_path / ".lock"))
    lock.acquire()
    assert record.read(str(tmp_path))["phase"] == "training"
    lock.release()
    got = record.read(str(tmp_path))
    assert got["phase"] == "crashed" and "supervisor is gone" in got["reason"] and got["step"] == 4
    assert record.read(str(tmp_path / "nowhere"))["phase"] == "stopped"


UNIFIED = """import argparse
def main(argv=None):
    p = argparse.ArgumentParser(prog="specforge")
    p.add_subparsers(dest="command").add_parser("train")
    p.parse_args(argv)
"""


def _fake_python(tmp_path, name, version, cli):
    """An interpreter whose ``specforge`` is ``version`` with ``cli`` as its specforge/cli.py."""
    site = tmp_path / name
    (site / "specforge").mkdir(parents=True)
    (site / "specforge" / "__init__.py").write_text("")
    if cli is not None:
        (site / "specforge" / "cli.py").write_text(cli)
    dist = site / f"specforge-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: specforge\nVersion: {version}\n")
    py = tmp_path / f"{name}-python"
    py.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return str(py)


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
    (tmp_path / "hsx.toml").write_text(
        f'[job]\nmodel = "m"\ndataset = "d.jsonl"\nout = "out"\n[train]\npython = "{py}"\n'
    )
    p = subprocess.run([RUNNER, "train", "setup", "--json", "--config", str(tmp_path / "hsx.toml")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    rep = json.loads(p.stdout)
    assert p.returncode == 1 and not rep["ok"] and why in rep["reason"], p.stdout + p.stderr
    good = _fake_python(tmp_path, "ok", "0.2.0", UNIFIED)
    assert control.check_python(good) is None


def test_the_crash_reason_is_the_tracebacks_exception_with_what_it_prints_below(tmp_path):
    from runner.train.supervisor import last_error

    log = tmp_path / "train.log"
    log.write_text(
        'an earlier launch\nTraceback (most recent call last):\n  File "a.py", line 1\nOldError: gone\n'
        "step 2: {'loss': 1.0}\nTraceback (most recent call last):\n  File \"cli.py\", line 9, in main\n"
        "    cfg = load()\n           ^^^^\npydantic_core.ValidationError: 1 validation error for Config\n"
        "training.no_such_key\n  Extra inputs are not permitted [type=extra_forbidden]\n"
    )
    start = len("an earlier launch\n")
    want = (
        "pydantic_core.ValidationError: 1 validation error for Config training.no_such_key "
        "Extra inputs are not permitted [type=extra_forbidden]"
    )
    assert last_error(str(log), start) == want
    log.write_text("loading\nKilled\n")
    assert last_error(str(log), 0) == "Killed"


def test_the_cpu_shims_reach_only_the_cpu_lanes_own_venv(tmp_path):
    _model(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "dataset.json").write_text(json.dumps({"aux_layer_ids": [1, 3, 4]}))
    lane = tmp_path / "lane"
    (lane / "bin").mkdir(parents=True)
    (lane / specforge_cpu.SHIMS).mkdir()
    (lane / specforge_cpu.SHIMS / "sitecustomize.py").write_text(specforge_cpu.SITECUSTOMIZE)
    for python, cpu in ((str(tmp_path / "gpu-venv/bin/python"), False), (str(lane / "bin/python"), True)):
        cfg = _cfg(tmp_path, python=python, run_dir=str(tmp_path / f"run-{cpu}"))
        paths, spec = runspec.prepare(cfg)
        env = runspec.command(cfg, paths, None)["env"]
        assert ("SPECFORGE_DEVICE" in env) is cpu and ("TORCHDYNAMO_DISABLE" in env) is cpu
        assert (env.get("OMP_NUM_THREADS") == "1") is cpu  # one thread per trainer process on a CPU
        assert (spec["training"].get("attention_backend") == "sdpa") is cpu
        assert ("dataloader_num_workers" in spec["data"]) is cpu


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


def _nvml(tmp_path, n):
    stub = tmp_path / f"nvml-{n}.json"
    stub.write_text(json.dumps({"gpus": [{"used_mib": 0, "procs": []}] * n}))
    return str(stub)


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
    cfg.write_text(
        '[job]\nmodel = "m"\ndataset = "d.jsonl"\nout = "out"\n[train]\npython = "auto"\nenvs_dir = "envs"\n'
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


def test_a_supervisor_whose_output_was_taken_since_the_check_refuses_and_says_who(tmp_path):
    from runner.train import supervisor

    out, root = tmp_path / "out", tmp_path / "run"
    code = (
        f"from runner.train import exclusive\nwith exclusive.using({str(out)!r}, 'verify --repair'):\n"
        "    print(1, flush=True); import time; time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"1"
        os.makedirs(root)
        rec = record.Record(str(root), {"phase": "preflight", "features": str(out)})
        rec.write()
        assert supervisor.main([str(root)]) == 3
        d = record.read(str(root))
        assert d["phase"] == "stopped" and d["reason"].startswith(
            f"verify --repair (pid {holder.pid}) runs on {out}"
        )
    finally:
        holder.kill()
        holder.wait()
    assert supervisor.Supervisor(str(root)) and not os.path.exists(root / "train.log")  # no trainer started


EXPORTER = """import json, os, sys
def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    out = argv[argv.index("--output-dir") + 1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"eagle_config": {"eagle_aux_hidden_state_layer_ids": IDS}}, f)
if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("ids", [[1, 3, 4], [0, 1, 2]])
def test_export_checks_the_drafts_layer_ids_and_says_how_sglang_serves_it(tmp_path, ids):
    _model(tmp_path)
    py = _fake_python(tmp_path, "sf", "0.2.0", EXPORTER.replace("IDS", repr(ids)))
    cfg = _cfg(tmp_path, python=py)
    (tmp_path / "out" / "dataset.json").write_text(json.dumps({"aux_layer_ids": [1, 3, 4]}))
    root = runspec.run_dir(cfg)
    _ckpt(tmp_path / "out-train" / "output", 4, ["training_state.pt", "training_state_rank0.pt"])
    record.Record(
        root, {"phase": "done", "run_id": "hsx-eagle3", "output_dir": f"{root}/output", "world": 1}
    ).write()
    rep = exporter.export(cfg)
    out = os.path.join(root, "export")
    if ids != [1, 3, 4]:  # the export's own config names other layers: refused loudly, files kept
        assert rep.code == 1 and rep.text.startswith(
            "export REFUSED: the exported draft's layer ids [0, 1, 2]"
        )
        assert "differ from the extraction's [1, 3, 4]" in rep.text and "do not serve it" in rep.text
        assert not rep.obj["ok"] and os.path.exists(os.path.join(out, "config.json"))
        return
    model = str(tmp_path / "model")
    assert rep.code == 0 and rep.obj["flags"] == [
        "--model-path", model, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", out,
        "--speculative-num-steps", "5", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
    ]  # fmt: skip
    assert rep.obj["message"] == (
        f"exported step 4 to {out}; serve it with: python -m sglang.launch_server --model-path {model} "
        f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {out} --speculative-num-steps 5 "
        "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8"
    )


def _wrapper(tmp_path, top_hidden: bool):
    """Kimi-K2.5's layout: a wrapper config around a DeepSeek-V3 text_config (remote code named in
    both), the weights under language_model. and a vision tower beside them."""
    m = tmp_path / "kimi"
    m.mkdir()
    text = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64,
            "vocab_size": 300, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128,
            "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}}  # fmt: skip
    wrapper = {"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"],
               "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"}, "text_config": text,
               "vision_config": {"hidden_size": 16}}  # fmt: skip
    if top_hidden:  # a remote-code config that answers the text model's size at the top too
        wrapper.update(hidden_size=64, vocab_size=300)
    (m / "config.json").write_text(json.dumps(wrapper))
    names = ("language_model.model.embed_tokens.weight", "language_model.lm_head.weight",
             "vision_tower.patch_embed.proj.weight", "mm_projector.proj.0.weight")  # fmt: skip
    raw = json.dumps({n: {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]} for n in names}).encode()
    (m / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 4)
    (m / "configuration_kimi_k25.py").write_text("")
    return m


@pytest.mark.parametrize("top_hidden", [False, True])
def test_a_wrappers_target_view_is_its_text_model_with_the_prefixed_keys(tmp_path, top_hidden):
    model = _wrapper(tmp_path, top_hidden)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "dataset.json").write_text(json.dumps({"aux_layer_ids": [1, 3, 4]}))
    cfg = _cfg(tmp_path, specforge={})
    cfg.job.model = str(model)
    paths, spec = runspec.prepare(cfg)
    view = json.load(open(os.path.join(paths.target, "config.json")))
    assert view["model_type"] == "deepseek_v3" and view["architectures"] == ["DeepseekV3ForCausalLM"]
    assert view["hidden_size"] == 64 and "auto_map" not in view and "vision_config" not in view
    assert not os.path.islink(os.path.join(paths.target, "config.json"))
    assert os.path.islink(os.path.join(paths.target, "model.safetensors"))
    index = json.load(open(os.path.join(paths.target, "model.safetensors.index.json")))
    assert index["weight_map"]["language_model.lm_head.weight"] == "model.safetensors"
    assert spec["model"]["embedding_key"] == "language_model.model.embed_tokens.weight"
    assert spec["model"]["lm_head_key"] == "language_model.lm_head.weight"
    assert json.load(open(paths.draft))["hidden_size"] == 64  # the text model's, for the draft too
    assert json.load(open(model / "config.json"))["model_type"] == "kimi_k25"  # the target is untouched


def test_gpus_and_nodes_are_specforges_topology_and_set_the_world_and_steps(tmp_path):
    _model(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "dataset.json").write_text(json.dumps({"aux_layer_ids": [1, 3, 4]}))
    cfg = _cfg(tmp_path, gpus=2, epochs=3)
    paths, spec = runspec.prepare(cfg)
    assert spec["deployment"]["trainer"] == {"nnodes": 1, "nproc_per_node": 2}
    assert runspec.world(spec) == 2 and runspec.total_steps(spec, 13) == 7 * 3  # each rank: ceil(13 / 2)
    assert _cfg(tmp_path).train.gpus == 1
    for bad, says in (({"gpus": 0}, "gpus must be at least 1"), ({"nodes": 2}, 'engine = "slurm"')):
        with pytest.raises(ConfigError, match=says):
            _cfg(tmp_path, **bad)


def test_the_run_dirs_disk_use_counts_its_files_and_not_the_links_to_the_output(tmp_path):
    big = tmp_path / "out" / "data_0.ckpt"
    big.parent.mkdir()
    big.write_bytes(os.urandom(1 << 20))
    run = tmp_path / "run"
    (run / "features").mkdir(parents=True)
    (run / "features" / "data_0.ckpt").symlink_to(big)
    (run / "output" / "hsx-eagle3-step20").mkdir(parents=True)
    (run / "output" / "hsx-eagle3-step20" / "training_state.pt").write_bytes(os.urandom(300_000))
    (run / "output" / "hsx-eagle3-latest").symlink_to(run / "output" / "hsx-eagle3-step20")
    got = control.disk(str(run))
    assert 300_000 <= got["run_bytes"] < 300_000 + 64 * 1024  # the checkpoint, once; the link trees nothing
    assert got["disk_free"] > 0 and os.path.ismount(got["disk_path"])
    assert control.disk(str(tmp_path / "none")) == {}


def test_a_resume_first_ends_what_a_killed_supervisors_launch_left_then_picks_the_checkpoint(tmp_path):
    """torchrun gives ranks 30 s to end after their launcher dies: one still going could save
    and rotate away the checkpoint a resume picked. Only this run's are ended."""
    from runner.contract.status import Phase, StatusRecord, write_record

    cfg = _cfg(tmp_path, python=sys.executable)
    write_record(str(tmp_path / "out" / "status.json"), StatusRecord(job="t", phase=Phase.DONE))
    root = runspec.run_dir(cfg)
    os.makedirs(root)
    open(os.path.join(root, ".hsx-run"), "w").close()  # hsx's own run dir
    open(os.path.join(root, "run.yaml"), "w").write(
        json.dumps({k: {} for k in ("model", "data", "training", "deployment")})
    )
    record.Record(
        root, {"phase": "crashed", "run_id": "hsx-eagle3", "output_dir": f"{root}/output", "world": 2}
    ).write()
    sleep = "import time; time.sleep(120)"
    ours = subprocess.Popen(
        [sys.executable, "-c", sleep, "specforge.cli", "train", "-c", os.path.join(root, "run.yaml")]
    )
    other = subprocess.Popen(
        [sys.executable, "-c", sleep, "specforge.cli", "train", "-c", str(tmp_path / "run.yaml")]
    )
    try:
        rep = control.resume(cfg)
        assert rep.code == 3 and "no complete checkpoint" in rep.text  # what it found once the stray was gone
        assert ours.wait(timeout=10) == -9 and other.poll() is None
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()
