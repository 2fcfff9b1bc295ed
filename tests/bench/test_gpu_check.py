"""bench/gpu_check.py without SGLang or a GPU: the JSON-leak check, the comparison of two dumps,
the report's verdict, the layer ids and models it checks, and that it cannot pass vacuously."""

from __future__ import annotations

import json
import math

import pytest
import torch

from bench import gpu_check as gc
from runner import layers
from runner.contract import dump
from runner.contract.ckpt import write_sample

H = 8
N = 12  # layers of both checked models


def sample(ids, seed=0, aux_scale=(1.0, 1.0, 1.0)):
    g = torch.Generator().manual_seed(seed)
    seq = len(ids)
    aux = torch.cat([torch.randn(1, seq, H, generator=g) * s for s in aux_scale], dim=-1)
    return {
        "input_ids": torch.tensor(ids),
        "loss_mask": torch.tensor(gc.loss_mask(ids)),
        "hidden_state": torch.randn(1, seq, H, generator=g),
        "aux_hidden_state": aux,
    }


def stats(tokens=100, bad=0, min_cosine=0.99999, max_abs=0.01, ref_max=4.0):
    return {"tokens": tokens, "bad": bad, "min_cosine": min_cosine, "max_abs": max_abs, "ref_max": ref_max}


def good_report(requests=4):
    """What a run where everything holds reports."""
    models = {}
    for arch, spec in gc.MODELS.items():
        runs = {}
        for ids in gc.aux_id_sets(N):
            names = ["final", *gc.aux_names(ids)]
            runs[gc.run_key(ids)] = {
                "samples": requests,
                "problems": [],
                "mixed_batches": True,
                "layers": {n: stats() for n in names},
            }
        a, b = gc.aux_id_sets(N)
        far = stats(bad=100, min_cosine=0.6, max_abs=1.3)  # layer i vs i+1 of the reference
        neighbour = {
            "samples": requests,
            "problems": [],
            "layers": {n: far for n in gc.neighbour_names(a, b)},
        }
        models[arch] = {"dtype": spec["dtype"], "runs": runs, "neighbour": neighbour}
    tput = {"patched_tokens_per_s": 95.0, "stock_tokens_per_s": 100.0, "ratio": 0.95}
    return {"requests": requests, "models": models, "throughput": tput}


# 1. the JSON-leak check


def test_an_empty_hidden_states_list_is_not_a_leak():
    # what the patched SGLang 0.5.23 answered to a dump request (CPU engine): the key, empty
    meta = {"id": "p-0", "finish_reason": {"type": "length", "length": 1}, "prompt_tokens": 4,
            "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": 1,
            "cached_tokens": 0, "weight_versions": [{"version": "default", "start": 0, "end": 1}],
            "cached_tokens_details": None, "hidden_states": [], "dp_rank": None}  # fmt: skip
    assert not gc.leaked(meta)
    assert not gc.leaked({"hidden_states": None}) and not gc.leaked({"hidden_states": [[]]})
    assert not gc.leaked({"id": "x"})


def test_hidden_state_values_in_the_json_are_a_leak():
    assert gc.leaked({"hidden_states": [[0.25, -1.0]]})
    assert gc.leaked({"id": "x", "aux_hidden_states": [0.5]})
    assert gc.leaked({"hidden_states": [[], [0.0]]})


# 2. the models and layer ids it checks


def test_it_checks_a_llama_and_a_deepseek_v3_in_float32():
    assert set(gc.MODELS) == {"llama", "deepseek_v3"}
    ds = gc.MODELS["deepseek_v3"]
    assert ds["dtype"] == "float32"  # bf16 breaks near-tied expert scores differently per backend
    assert ds["config"]["num_hidden_layers"] == gc.MODELS["llama"]["config"]["num_hidden_layers"] == N


def test_default_and_non_default_ids_whose_smallest_is_not_1():
    default, other = gc.aux_id_sets(N)
    assert default == layers.default_aux_ids(N) == [1, 5, 8]
    assert other == [2, 6, 9] and min(other) != 1  # DeepSeek's own rule was one off for these
    for ids in (default, other):
        assert layers.resolve_aux_ids(ids, N) == ids
    assert gc.neighbour_names(default, other) == ["aux 1 vs 2", "aux 5 vs 6", "aux 8 vs 9"]


def test_the_deepseek_model_has_what_sglang_reads(tmp_path):
    tiny = {"hidden_size": 32, "intermediate_size": 64, "moe_intermediate_size": 16, "num_hidden_layers": 4,
            "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16,
            "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1}  # fmt: skip
    out = tmp_path / "ds"
    gc.build_model("deepseek_v3", str(out), config=tiny, vocab_size=64)
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


# 3. comparing two dumps


def test_identical_dumps_match_on_every_layer():
    a = sample([5, 6, 7, 8])
    got = gc.compare_samples(a, a, ["aux 1", "aux 5", "aux 8"], cosine=0.999)
    assert list(got) == ["final", "aux 1", "aux 5", "aux 8"]
    for s in got.values():
        assert s["tokens"] == 4 and s["bad"] == 0 and s["min_cosine"] > 0.9999 and s["max_abs"] == 0.0


def test_a_layer_captured_one_off_is_seen_per_layer():
    a = sample([5, 6, 7, 8])
    b = {k: v.clone() for k, v in a.items()}
    b["aux_hidden_state"][..., H : 2 * H] = torch.randn(1, 4, H)  # another layer's states in slot 1
    got = gc.compare_samples(a, b, ["aux 1", "aux 5", "aux 8"], cosine=0.999)
    assert got["aux 5"]["bad"] == 4 and got["aux 5"]["min_cosine"] < 0.9
    assert got["aux 1"]["bad"] == got["aux 8"]["bad"] == got["final"]["bad"] == 0


def test_shapes_that_differ_are_refused():
    a, b = sample([5, 6, 7]), sample([5, 6, 7, 8])
    with pytest.raises(ValueError, match="shape"):
        gc.compare_samples(a, b, ["aux 1", "aux 5", "aux 8"], cosine=0.999)


def test_nan_counts_as_bad_and_as_the_worst():
    a = sample([5, 6])
    b = {k: v.clone() for k, v in a.items()}
    b["hidden_state"][0, 1, 0] = float("nan")
    s = gc.compare_samples(a, b, ["aux 1", "aux 5", "aux 8"], cosine=0.999)["final"]
    assert s["bad"] == 1 and s["min_cosine"] == -1.0 and math.isinf(s["max_abs"])
    assert gc.layer_failures(s, gc.MODELS["deepseek_v3"]["tolerance"])


def test_merge_keeps_the_worst_of_each():
    got = gc.merge(stats(tokens=3, bad=1, min_cosine=0.99, max_abs=0.5, ref_max=2.0),
                   stats(tokens=4, bad=0, min_cosine=0.999, max_abs=0.7, ref_max=1.0))  # fmt: skip
    assert got == stats(tokens=7, bad=1, min_cosine=0.99, max_abs=0.7, ref_max=2.0)


def test_tolerance_scale_errors_and_the_deepseek_allowance():
    llama, ds = gc.MODELS["llama"]["tolerance"], gc.MODELS["deepseek_v3"]["tolerance"]
    assert gc.layer_failures(stats(), llama) == [] and gc.layer_failures(stats(), ds) == []
    # a routing decision flipped on one token in a thousand: DeepSeek allows it, a dense model not
    flipped = stats(tokens=1000, bad=1, min_cosine=0.985, max_abs=0.5, ref_max=4.0)
    assert gc.layer_failures(flipped, ds) == [] and gc.layer_failures(flipped, llama)
    # every token right in direction, twice too large: cosine alone cannot see it
    assert gc.layer_failures(stats(max_abs=4.0, ref_max=4.0), llama)
    assert gc.layer_failures(stats(tokens=0), llama)


def write_dump(d, rid, s):
    d.mkdir(exist_ok=True)
    nbytes, checksum = write_sample(dump.data_path(str(d), rid), **s)
    dump.write_sidecar(str(d), rid, {"seq": len(s["input_ids"]), "bytes": nbytes, "checksum": checksum})


def test_compare_dirs_counts_samples_and_names_each_problem(tmp_path):
    batch = [[5, 6, 7, 8], [9, 10, 11], [12, 13], [14, 15, 16]]
    ref, out = tmp_path / "ref", tmp_path / "out"
    for i, ids in enumerate(batch):
        write_dump(ref, f"cmp-{i}", sample(ids, seed=i))
    write_dump(out, "cmp-0", sample(batch[0], seed=0))
    write_dump(out, "cmp-1", sample([9, 10, 99], seed=1))  # not the tokens sent
    write_dump(out, "cmp-3", sample(batch[3], seed=3))
    (out / "cmp-3.json").write_text(json.dumps({"seq": 3, "bytes": 1, "checksum": "0"}))  # wrong checksum
    got = gc.compare_dirs(str(ref), str(out), "cmp", batch, ["aux 1", "aux 5", "aux 8"], cosine=0.999)
    assert got["samples"] == 1 and got["layers"]["final"]["tokens"] == 4
    assert [p.split(":")[0] for p in got["problems"]] == ["cmp-1", "cmp-2", "cmp-3"]
    assert "input_ids" in got["problems"][0] and "no dump" in got["problems"][1]
    assert "checksum" in got["problems"][2]


# 4. the verdict


def test_a_report_where_everything_holds_passes():
    assert gc.verdict(good_report()) == []


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda r: r.update(requests=0), "no requests"),
        (lambda r: r["models"].pop("deepseek_v3"), "deepseek_v3: not checked"),
        (lambda r: r["models"]["llama"].update(error="RuntimeError: server exited"), "server exited"),
        (lambda r: r["models"]["llama"]["runs"].pop("2,6,9"), "ids 2,6,9: not compared"),
        (lambda r: r["models"]["llama"]["runs"]["1,5,8"].update(samples=0, layers={}), "0 of 4 samples"),
        (lambda r: r["models"]["llama"]["runs"]["1,5,8"]["layers"].pop("aux 5"), "aux 5: missing"),
        (lambda r: r["models"]["llama"]["runs"]["1,5,8"]["problems"].append("cmp-2: no dump"), "cmp-2"),
        (lambda r: r["models"]["llama"]["runs"]["1,5,8"].update(mixed_batches=False), "mixed"),
        (lambda r: r["models"]["deepseek_v3"]["runs"]["2,6,9"]["layers"]["aux 9"].update(bad=90), "aux 9"),
        (lambda r: r["models"]["llama"]["neighbour"]["layers"]["aux 5 vs 6"].update(stats()), "aux 5 vs 6"),
        (lambda r: r["models"]["llama"].pop("neighbour"), "neighbour"),
        (lambda r: r["throughput"].update(ratio=0.5), "throughput"),
        (lambda r: r.update(throughput={"error": "RuntimeError: boom"}), "boom"),
    ],
)
def test_the_verdict_fails_on(spoil, message):
    r = good_report()
    spoil(r)
    failures = gc.verdict(r)
    assert failures and any(message in f for f in failures), failures


def test_mixed_batches_read_from_the_server_log():
    one = "[2025] Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, "
    assert not gc.mixed_batches(one * 3)
    assert gc.mixed_batches(one + "[2025] Prefill batch [7], #new-seq: 3, #new-token: 900, ")
    assert gc.mixed_batches("Prefill batch, #new-seq: 12, #new-token: 900, ")


def test_stock_argv_drops_the_patch_and_keeps_the_rest():
    from runner.contract.launch import server_argv

    patched = server_argv(python="/py", model="/m", host="127.0.0.1", port=31001, tp_size=1, dp_size=1,
                          mem_fraction=0.7, aux_layer_ids=[2, 6, 9],
                          extra_args=["--dtype", "float32", "--attention-backend", "triton"])  # fmt: skip
    stock = gc.stock_argv(patched, 31002)
    assert stock[1:3] == ["-m", "sglang.launch_server"]
    for flag in ("--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3",
                 "--return-aux-hidden-state-layer-ids"):  # fmt: skip
        assert flag not in stock
    assert stock[stock.index("--port") + 1] == "31002" and "31001" not in stock
    assert stock[stock.index("--dtype") + 1] == "float32" and "--disable-radix-cache" in stock
    assert stock[stock.index("--attention-backend") + 1] == "triton"


def test_prompts_give_as_many_as_asked_one_long_enough_to_be_chunked():
    assert len(gc.prompts(1, 64)) == 1 and len(gc.prompts(5, 64)) == 5
    p = gc.prompts(5, 64)
    assert len(p[0]) == 64 and len(p[1]) == 5 and all(3 <= t < gc.VOCAB for x in p for t in x)


def test_main_fails_when_the_servers_write_nothing(tmp_path, monkeypatch, capsys):
    """No server, no dump: exit 1 and a report saying so, never a pass over zero samples."""

    class NoServer:
        def __init__(self, argv, port, log, env=None):
            self.log_path = log
            open(log, "w").close()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(gc, "Server", NoServer)
    monkeypatch.setattr(gc, "build_model", lambda arch, out_dir, **kw: None)
    monkeypatch.setattr(gc, "run_requests", lambda *a, **kw: 1000.0)
    rc = gc.main(["--workdir", str(tmp_path), "--requests", "3", "--tokens", "32"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["ok"] is False
    assert any("0 of 3 samples" in f for f in report["failures"])
    assert json.loads((tmp_path / "report.json").read_text()) == report
