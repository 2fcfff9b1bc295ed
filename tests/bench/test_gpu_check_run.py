"""bench/gpu_check/run.py without SGLang or a GPU: the models it writes (the Kimi wrapper among
them), the servers' command lines per run and tensor-parallel size, the prompts, and that
main cannot pass vacuously. What is judged: tests/bench/test_gpu_check_judge.py."""

from __future__ import annotations

import json

import pytest
import torch

from bench.gpu_check import run as gc
from bench.gpu_check.judge import EAGER, MODELS, NO_FUSION, run_plan
from runner.contract.launch import check_argv, parse_flags, server_argv
from runner.serve.server import OVERRIDE_FLAG

TINY_DS = {"hidden_size": 32, "intermediate_size": 64, "moe_intermediate_size": 16, "num_hidden_layers": 4,
           "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16,
           "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4,
           "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1}  # fmt: skip
COMMON = ["--skip-tokenizer-init", "--chunked-prefill-size", "1024", "--context-length", "4112"]


@pytest.fixture(scope="module")
def kimi(tmp_path_factory):
    """The Kimi wrapper as gpu_check writes it, around a tiny DeepSeek-V3."""
    out = tmp_path_factory.mktemp("kimi") / "model"
    gc.build_model("kimi_k25", str(out), config=TINY_DS, vocab_size=64)
    return out


@pytest.fixture
def llama(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    )
    return tmp_path


def flag(argv, name):
    values = parse_flags(argv[3:]).get(name)
    return values[-1] if values else None


# 1. the models it writes


def test_the_deepseek_model_has_what_sglang_reads(tmp_path):
    out = tmp_path / "ds"
    gc.build_model("deepseek_v3", str(out), config=TINY_DS, vocab_size=64)
    cfg = json.loads((out / "config.json").read_text())
    assert (
        cfg["moe_layer_freq"] == 1 and cfg["topk_method"] == "noaux_tc" and cfg["scoring_func"] == "sigmoid"
    )
    assert cfg["rope_scaling"]["type"] == "yarn"
    assert cfg["first_k_dense_replace"] >= 1 and cfg["n_shared_experts"] >= 1 and cfg["n_group"] == 2
    assert cfg.get("dtype", cfg.get("torch_dtype")) == "float32"
    from safetensors.torch import load_file

    w = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in w.values())
    norm = w["model.norm.weight"]  # not all ones: pre- and post-norm states differ in direction
    assert norm.std() > 0.1 and not any(p.name.endswith(".part") for p in tmp_path.iterdir())


def test_the_kimi_model_is_the_deepseek_v3_in_kimi_k25s_wrapper(kimi):
    cfg = json.loads((kimi / "config.json").read_text())
    assert cfg["architectures"] == ["KimiK25ForConditionalGeneration"] and cfg["model_type"] == "kimi_k25"
    text = cfg["text_config"]
    assert text["model_type"] == "kimi_k2" and text["num_hidden_layers"] == TINY_DS["num_hidden_layers"]
    assert text["q_lora_rank"] == TINY_DS["q_lora_rank"] and "vision_config" in cfg
    from safetensors.torch import load_file

    w = load_file(str(kimi / "model.safetensors"))
    assert w["language_model.model.norm.weight"].dtype == torch.float32
    assert w["language_model.model.norm.weight"].std() > 0.1  # the text model's random norms, wrapped
    assert any(k.startswith("vision_tower.") for k in w) and not any(k.startswith("model.") for k in w)
    assert sorted(p.name for p in kimi.parent.iterdir()) == ["model"]  # the text model aside is gone


# 2. the servers' command lines


def test_the_kimi_patched_server_is_text_only_as_hsx_starts_it(kimi):
    from runner.serve.server import text_only

    argv = gc.patched_argv("kimi_k25", str(kimi), 31001, [1, 5, 8], 1, COMMON)
    assert json.loads(flag(argv, OVERRIDE_FLAG)[0]) == {"language_model_only": True}
    assert argv[argv.index(OVERRIDE_FLAG) :] == text_only(str(kimi), [])[-2:]
    assert "--trust-remote-code" in argv and flag(argv, "--tp-size") == ["1"]
    assert flag(argv, "--dtype") == ["float32"] and flag(argv, "--attention-backend") == ["triton"]
    check_argv(argv[3:], [1, 5, 8])  # the launcher's own checks accept it
    ref = gc.reference_argv("kimi_k25", str(kimi), 31002, "/d")
    assert ref[1:3] == ["-m", "runner.serve.reference_server"] and "--trust-remote-code" in ref


def test_a_plain_model_gets_no_override(llama):
    argv = gc.patched_argv("llama", str(llama), 31001, [1, 5, 8], 2, COMMON)
    assert (
        OVERRIDE_FLAG not in argv
        and "--trust-remote-code" not in argv
        and "--mm-enable-dp-encoder" not in argv
    )
    assert flag(argv, "--tp-size") == ["2"] and flag(argv, "--dtype") == ["bfloat16"]
    assert "--trust-remote-code" not in gc.reference_argv("llama", str(llama), 31002, "/d")


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_each_kimi_run_carries_exactly_its_flag_at_the_tp(kimi, tp):
    names = []
    for name, ids, flags in run_plan("kimi_k25", tp):
        argv = gc.patched_argv("kimi_k25", str(kimi), 31001, ids, tp, COMMON, flags)
        names.append(name)
        assert argv.count(EAGER) == (name == "eager 1,5,8"), name
        assert argv.count(NO_FUSION) == (name == "no-fusion 1,5,8"), name
        assert flag(argv, "--tp-size") == [str(tp)] and flag(argv, "--return-aux-hidden-state-layer-ids") == [
            str(i) for i in ids
        ]
        assert OVERRIDE_FLAG in argv  # every Kimi run text-only, eager and fusion-off too
        check_argv(argv[3:], ids)
    assert ("no-fusion 1,5,8" in names) == (tp > 1) and "eager 1,5,8" in names


@pytest.mark.parametrize(("tp", "replicated"), [(1, False), (2, False), (4, True), (8, True)])
def test_the_tiny_vision_tower_is_replicated_where_tp_cannot_split_its_heads(kimi, llama, tp, replicated):
    heads = json.loads((kimi / "config.json").read_text())["vision_config"]["num_attention_heads"]
    assert heads == 2
    assert gc.encoder_args(str(kimi), tp) == (["--mm-enable-dp-encoder"] if replicated else [])
    argv = gc.patched_argv("kimi_k25", str(kimi), 31001, [1, 5, 8], tp, COMMON)
    assert ("--mm-enable-dp-encoder" in argv) == replicated
    assert gc.encoder_args(str(llama), 8) == [] and gc.encoder_args("/nonexistent", 8) == []


def test_stock_argv_drops_the_patch_and_keeps_the_rest():
    patched = server_argv(python="/py", model="/m", host="127.0.0.1", port=31001, tp_size=8, dp_size=1,
                          mem_fraction=0.7, aux_layer_ids=[2, 6, 9],
                          extra_args=["--dtype", "float32", "--attention-backend", "triton"])  # fmt: skip
    stock = gc.stock_argv(patched, 31002)
    assert stock[1:3] == ["-m", "sglang.launch_server"]
    for f in ("--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3",
              "--return-aux-hidden-state-layer-ids"):  # fmt: skip
        assert f not in stock
    assert stock[stock.index("--port") + 1] == "31002" and "31001" not in stock
    assert stock[stock.index("--dtype") + 1] == "float32" and "--disable-radix-cache" in stock
    assert stock[stock.index("--attention-backend") + 1] == "triton"
    assert stock[stock.index("--tp-size") + 1] == "8"  # the baseline at the same tp


def test_gpu_check_baseline_is_stock_sglang_without_capture():
    patched = server_argv(python="/venv/bin/python", model="/m", host="127.0.0.1", port=30001, tp_size=8,
                          dp_size=1, mem_fraction=0.85, aux_layer_ids=[1, 4, 7],
                          extra_args=["--chunked-prefill-size", "512"])  # fmt: skip
    stock = gc.stock_argv(patched, 31002)
    assert stock[1:3] == ["-m", "sglang.launch_server"]
    flags = parse_flags(stock[3:])
    assert flags["--port"] == [["31002"]] and flags["--chunked-prefill-size"] == [["512"]]
    assert "--disable-radix-cache" in flags  # same cache setting on both sides
    for gone in (
        "--enable-return-aux-hidden-states",
        "--speculative-algorithm",
        "--return-aux-hidden-state-layer-ids",
    ):
        assert gone not in flags


def test_prompts_give_as_many_as_asked_one_long_enough_to_be_chunked():
    assert len(gc.prompts(1, 64)) == 1 and len(gc.prompts(5, 64)) == 5
    p = gc.prompts(5, 64)
    assert len(p[0]) == 64 and len(p[1]) == 5
    assert all(3 <= t < gc.VOCAB - 1 for x in gc.prompts(24, 4096) for t in x)  # never Kimi's media id


# 3. main


class NoServer:
    """Starts nothing, writes no dump; records each command line."""

    argvs: list[list[str]] = []

    def __init__(self, argv, port, log, env=None):
        self.argvs.append(argv)
        open(log, "w").close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.mark.parametrize("tp", [1, 2])
def test_main_fails_when_the_servers_write_nothing(tmp_path, monkeypatch, capsys, tp):
    """No server, no dump: exit 1 and a report saying so, never a pass over zero samples."""
    monkeypatch.setattr(NoServer, "argvs", [])
    monkeypatch.setattr(gc, "Server", NoServer)
    monkeypatch.setattr(gc, "build_model", lambda arch, out_dir, **kw: None)
    monkeypatch.setattr(gc, "run_requests", lambda *a, **kw: 1000.0)
    rc = gc.main(["--workdir", str(tmp_path), "--requests", "3", "--tokens", "32", "--tp", str(tp)])
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert rc == 1 and report["ok"] is False and report["tp"] == tp
    assert any("0 of 3 samples" in f for f in report["failures"])
    assert json.loads((tmp_path / "report.json").read_text()) == report
    kimi = report["models"]["kimi_k25"]
    assert sorted(kimi["runs"]) == sorted(name for name, _, _ in run_plan("kimi_k25", tp))
    assert ("skipped" in kimi["fusion"]) == (tp == 1)
    # the last line: the summary, with the tp and c/a
    assert out.err.splitlines()[-1] == report["summary"]
    assert f"tp {tp}" in report["summary"] and "c/a = 1.000" in report["summary"]
    sglang = [a for a in NoServer.argvs if a[2] in ("patches.sglang_dump", "sglang.launch_server")]
    n_runs = sum(len(run_plan(arch, tp)) for arch in MODELS) + 2  # + patched and stock throughput
    assert len(sglang) == n_runs and all(a[a.index("--tp-size") + 1] == str(tp) for a in sglang)
    assert sum(a[2] == "runner.serve.reference_server" for a in NoServer.argvs) == 2 * len(MODELS)


def test_main_refuses_a_tp_below_1(tmp_path):
    with pytest.raises(SystemExit):
        gc.main(["--workdir", str(tmp_path), "--tp", "0"])
