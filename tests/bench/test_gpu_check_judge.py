"""bench/gpu_check/judge.py without SGLang or a GPU: the JSON-leak check, the models and layer ids,
the run plan per tensor-parallel size, the comparison of two dumps, what a server log shows,
the report's verdict (that it cannot pass vacuously) and its summary line."""

from __future__ import annotations

import json
import math

import pytest
import torch

from bench.gpu_check import judge as gc
from runner.codec.ckpt import write_sample
from runner.contract import dump
from runner.data import layers

H = 8
N = 12  # layers of every checked model


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


def good_run(name, ids, flags, requests, tp):
    variant = name.split(" ")[0]
    fusion = "forced off" if variant == "no-fusion" else "on" if tp > 1 else "off"
    return {
        "flags": flags, "samples": requests, "problems": [], "layers": {n: stats() for n in ["final", *gc.aux_names(ids)]},
        "mixed_batches": True, "prefill_graphs": variant != "eager",
        "prefill_graph_max_tokens": None if variant == "eager" else 1024, "allreduce_fusion": fusion,
    }  # fmt: skip


def good_report(requests=4, tp=1):
    """What a run where everything holds reports, at tensor-parallel size ``tp``."""
    models = {}
    for arch, spec in gc.MODELS.items():
        runs = {name: good_run(name, ids, flags, requests, tp) for name, ids, flags in gc.run_plan(arch, tp)}
        a, b = gc.aux_id_sets(N)
        far = stats(bad=100, min_cosine=0.6, max_abs=1.3)  # layer i vs i+1 of the reference
        neighbour = {
            "samples": requests,
            "problems": [],
            "layers": {n: far for n in gc.neighbour_names(a, b)},
        }
        models[arch] = {"dtype": spec["dtype"], "runs": runs, "neighbour": neighbour}
        pair = gc.fusion_runs(arch, tp)
        if pair:
            near = stats(min_cosine=0.99998, max_abs=0.002)  # fused vs unfused: rounding apart
            layers_ = {n: near for n in ["final", *gc.aux_names(a)]}
            models[arch]["fusion"] = {"on": pair[0], "off": pair[1], "samples": requests, "problems": [],
                                      "layers": layers_}  # fmt: skip
        elif "no-fusion" in spec.get("variants", []):
            models[arch]["fusion"] = {"skipped": gc.FUSION_SKIPPED}
    tput = {"patched_tokens_per_s": 95.0, "stock_tokens_per_s": 100.0, "ratio": 0.95}
    return {"tp": tp, "requests": requests, "models": models, "throughput": tput}


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


# 2. the models, layer ids and runs it checks


def test_it_checks_a_llama_a_deepseek_v3_and_kimi_k25_in_float32():
    assert set(gc.MODELS) == {"llama", "deepseek_v3", "kimi_k25"}
    ds, kimi = gc.MODELS["deepseek_v3"], gc.MODELS["kimi_k25"]
    assert ds["dtype"] == "float32"  # bf16 breaks near-tied expert scores differently per backend
    assert kimi["wraps"] == "deepseek_v3" and kimi["config"] == ds["config"]
    assert kimi["dtype"] == ds["dtype"] and kimi["tolerance"] == ds["tolerance"]
    assert kimi["sglang_args"] == ds["sglang_args"] and kimi["trust_remote_code"] is True
    for spec in gc.MODELS.values():
        assert spec["config"]["num_hidden_layers"] == N


def test_default_and_non_default_ids_whose_smallest_is_not_1():
    default, other = gc.aux_id_sets(N)
    assert default == layers.default_aux_ids(N) == [1, 5, 8]
    assert other == [2, 6, 9] and min(other) != 1  # DeepSeek's own rule was one off for these
    for ids in (default, other):
        assert layers.resolve_aux_ids(ids, N) == ids
    assert gc.neighbour_names(default, other) == ["aux 1 vs 2", "aux 5 vs 6", "aux 8 vs 9"]


def test_at_tp_1_kimi_runs_graphs_and_eager_but_no_fusion_run():
    plan = gc.run_plan("kimi_k25", 1)
    assert [(name, ids) for name, ids, _ in plan] == [
        ("graphs 1,5,8", [1, 5, 8]), ("graphs 2,6,9", [2, 6, 9]), ("eager 1,5,8", [1, 5, 8]),
    ]  # fmt: skip
    assert [flags for _, _, flags in plan] == [[], [], ["--disable-prefill-cuda-graph"]]
    assert gc.fusion_runs("kimi_k25", 1) is None


@pytest.mark.parametrize("tp", [2, 8])
def test_at_tp_above_1_kimi_also_runs_with_the_fusion_forced_off(tp):
    plan = {name: (ids, flags) for name, ids, flags in gc.run_plan("kimi_k25", tp)}
    assert list(plan) == ["graphs 1,5,8", "graphs 2,6,9", "eager 1,5,8", "no-fusion 1,5,8"]
    assert plan["no-fusion 1,5,8"] == ([1, 5, 8], ["--enforce-disable-flashinfer-allreduce-fusion"])
    assert plan["graphs 1,5,8"] == ([1, 5, 8], [])  # SGLang's defaults: graphs on, fusion where it enables it
    assert gc.fusion_runs("kimi_k25", tp) == ("graphs 1,5,8", "no-fusion 1,5,8")


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_the_other_models_run_sglang_defaults_only(tp):
    for arch in ("llama", "deepseek_v3"):
        assert [(name, flags) for name, _, flags in gc.run_plan(arch, tp)] == [
            ("graphs 1,5,8", []), ("graphs 2,6,9", []),
        ]  # fmt: skip
        assert gc.fusion_runs(arch, tp) is None


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


# 4. what a server's log shows (SGLang 0.5.23's own lines)

GRAPHS = (
    "[2026] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, 16, 512, 1024], "
    "avail mem=120.50 GB\n[2026] Capture target prefill CUDA graph end. elapsed=12.00 s, mem usage=0.40 GB\n"
)
AUTO_FUSION = (
    "[2026 hsx] Auto-enabling FlashInfer AllReduce Fusion (auto) for KimiK25ForConditionalGeneration\n"
)
FORCED_OFF = "[2026 hsx] FlashInfer allreduce fusion is forcibly disabled via --enforce-disable-flashinfer-allreduce-fusion.\n"


def test_mixed_batches_read_from_the_server_log():
    one = "[2025] Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, "
    assert not gc.mixed_batches(one * 3)
    assert gc.mixed_batches(one + "[2025] Prefill batch [7], #new-seq: 3, #new-token: 900, ")
    assert gc.mixed_batches("Prefill batch, #new-seq: 12, #new-token: 900, ")


def test_log_facts_tell_graphs_from_eager_and_the_fusion_state():
    mixed = "Prefill batch, #new-seq: 3, #new-token: 900, "
    got = gc.log_facts(GRAPHS + AUTO_FUSION + mixed)
    assert got == {"mixed_batches": True, "prefill_graphs": True, "prefill_graph_max_tokens": 1024,
                   "allreduce_fusion": "on"}  # fmt: skip
    # the auto-enable pass runs, then the user's switch wins: both lines, forced off
    assert gc.log_facts(GRAPHS + AUTO_FUSION + FORCED_OFF)["allreduce_fusion"] == "forced off"
    eager = gc.log_facts("Capture target decode CUDA graph end. elapsed=3 s\n" + mixed)
    assert eager["prefill_graphs"] is False and eager["prefill_graph_max_tokens"] is None
    assert eager["allreduce_fusion"] == "off"
    begun = gc.log_facts(GRAPHS.splitlines()[0])  # a capture that began and never ended: none
    assert begun["prefill_graphs"] is False


# 5. the verdict


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_a_report_where_everything_holds_passes(tp):
    assert gc.verdict(good_report(tp=tp)) == []


def spoil_layer(arch, run, layer, **kw):
    return lambda r: r["models"][arch]["runs"][run]["layers"][layer].update(**kw)


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda r: r.update(requests=0), "no requests"),
        (lambda r: r.pop("tp"), "tp None"),
        (lambda r: r["models"].pop("deepseek_v3"), "deepseek_v3: not checked"),
        (lambda r: r["models"].pop("kimi_k25"), "kimi_k25: not checked"),
        (lambda r: r["models"]["llama"].update(error="RuntimeError: server exited"), "server exited"),
        (lambda r: r["models"]["llama"]["runs"].pop("graphs 2,6,9"), "graphs 2,6,9: not compared"),
        (
            lambda r: r["models"]["llama"]["runs"]["graphs 1,5,8"].update(samples=0, layers={}),
            "0 of 4 samples",
        ),
        (lambda r: r["models"]["llama"]["runs"]["graphs 1,5,8"]["layers"].pop("aux 5"), "aux 5: missing"),
        (
            lambda r: r["models"]["llama"]["runs"]["graphs 1,5,8"]["problems"].append("cmp-2: no dump"),
            "cmp-2",
        ),
        (lambda r: r["models"]["llama"]["runs"]["graphs 1,5,8"].update(mixed_batches=False), "mixed"),
        (spoil_layer("deepseek_v3", "graphs 2,6,9", "aux 9", bad=90), "aux 9"),
        (lambda r: r["models"]["llama"]["neighbour"]["layers"]["aux 5 vs 6"].update(stats()), "aux 5 vs 6"),
        (lambda r: r["models"]["llama"].pop("neighbour"), "neighbour"),
        (lambda r: r["throughput"].update(ratio=0.5), "throughput"),
        (lambda r: r.update(throughput={"error": "RuntimeError: boom"}), "boom"),
        # the Kimi runs at TP 1
        (
            spoil_layer("kimi_k25", "eager 1,5,8", "final", bad=50, min_cosine=0.5),
            "kimi_k25 eager 1,5,8 final",
        ),
        (spoil_layer("kimi_k25", "eager 1,5,8", "aux 5", max_abs=9.0), "kimi_k25 eager 1,5,8 aux 5: max abs"),
        (lambda r: r["models"]["kimi_k25"]["runs"].pop("eager 1,5,8"), "kimi_k25 eager 1,5,8: not compared"),
        (
            lambda r: r["models"]["kimi_k25"]["runs"]["eager 1,5,8"].update(prefill_graphs=True),
            "not an eager run",
        ),
        (
            lambda r: r["models"]["kimi_k25"]["runs"]["graphs 1,5,8"].update(prefill_graphs=False),
            "graph path",
        ),
        (lambda r: r["models"]["llama"]["runs"]["graphs 2,6,9"].pop("prefill_graphs"), "graph path"),
        (
            lambda r: r["models"]["kimi_k25"]["runs"].update(
                {"eager 1,5,8": {"error": "RuntimeError: gone"}}
            ),
            "gone",
        ),
    ],
)
def test_the_verdict_fails_on(spoil, message):
    r = good_report()
    spoil(r)
    failures = gc.verdict(r)
    assert failures and any(message in f for f in failures), failures


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (
            spoil_layer("kimi_k25", "no-fusion 1,5,8", "aux 8", bad=30),
            "kimi_k25 no-fusion 1,5,8 aux 8: 30 of 100",
        ),
        (
            spoil_layer("kimi_k25", "graphs 1,5,8", "final", min_cosine=0.8),
            "kimi_k25 graphs 1,5,8 final: worst",
        ),
        (lambda r: r["models"]["kimi_k25"]["runs"].pop("no-fusion 1,5,8"), "no-fusion 1,5,8: not compared"),
        (
            lambda r: r["models"]["kimi_k25"]["runs"]["no-fusion 1,5,8"].update(allreduce_fusion="on"),
            "forced off",
        ),
        (
            lambda r: r["models"]["kimi_k25"]["runs"]["graphs 1,5,8"].update(allreduce_fusion="off"),
            "fused path",
        ),
        (lambda r: r["models"]["kimi_k25"].pop("fusion"), "kimi_k25 fusion on vs off: not compared"),
        (lambda r: r["models"]["kimi_k25"]["fusion"].update(samples=3), "fusion on vs off: 3 of 4 samples"),
        (
            lambda r: r["models"]["kimi_k25"]["fusion"]["layers"].pop("aux 1"),
            "fusion on vs off aux 1: missing",
        ),
        # a report made at TP 1 (no fusion runs) that says TP 2
        (lambda r: r.update(good_report(tp=1), tp=2), "no-fusion 1,5,8: not compared"),
    ],
)
def test_the_verdict_at_tp_2_fails_on(spoil, message):
    r = good_report(tp=2)
    spoil(r)
    failures = gc.verdict(r)
    assert failures and any(message in f for f in failures), failures


def test_the_fusion_difference_is_reported_not_judged():
    """Each fusion run is judged against the reference; how far apart the two are is information."""
    r = good_report(tp=2)
    r["models"]["kimi_k25"]["fusion"]["layers"]["final"] = stats(bad=40, min_cosine=0.95, max_abs=0.9)
    assert gc.verdict(r) == []


def test_at_tp_1_the_fusion_check_is_skipped_with_its_reason():
    r = good_report(tp=1)
    assert (
        r["models"]["kimi_k25"]["fusion"] == {"skipped": gc.FUSION_SKIPPED} and "TP > 1" in gc.FUSION_SKIPPED
    )
    assert r["models"]["kimi_k25"]["runs"]["graphs 1,5,8"]["allreduce_fusion"] == "off"  # as at TP 1
    assert gc.verdict(r) == []


def test_the_summary_line_gives_the_tp_and_c_over_a():
    r = good_report(tp=8)
    r.update(failures=[], ok=True)
    line = gc.summary(r)
    assert line.startswith("gpu_check: ok;") and "tp 8" in line
    assert "c/a = 0.950" in line and "patched 95 / stock 100" in line and ">= 0.9" in line
    r.update(failures=["a", "b"], ok=False, throughput={"error": "RuntimeError: boom"})
    line = gc.summary(r)
    assert "FAIL (2 failures)" in line and "c/a = n/a (RuntimeError: boom" in line
