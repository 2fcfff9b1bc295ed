"""What bench/gpu_check/run.py checks and how it judges it, without a server or a GPU: the models
and their tolerances, the run plan (which SGLang runs, at which aux ids, with which flags),
the per-layer comparison of two dump directories, what a server's log shows, and the verdict."""

from __future__ import annotations

import re

from runner.contract import dump
from runner.data import layers

MIN_RATIO = 0.9  # c/a: patched / stock prompt tokens per second
EAGER = "--disable-prefill-cuda-graph"
NO_FUSION = "--enforce-disable-flashinfer-allreduce-fusion"
# Run variants, each SGLang's defaults plus its flags. "graphs": the GPU default, prefill CUDA
# graphs on (their outputs are graph-pool views the next replay rewrites), and at TP > 1 the
# FlashInfer all-reduce + add + RMSNorm fusion where SGLang turns it on (sm90/sm100).
VARIANTS = {"graphs": [], "eager": [EAGER], "no-fusion": [NO_FUSION]}
FUSION_SKIPPED = "TP 1: the FlashInfer all-reduce + norm fusion replaces an all-reduce, which only TP > 1 has"
_LLAMA = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=8,
              num_key_value_heads=8, head_dim=128, max_position_embeddings=16384)  # fmt: skip
# DeepSeek-V3's own head sizes (what its GPU kernels are built for), fewer and smaller experts.
_DEEPSEEK_V3 = dict(hidden_size=1024, intermediate_size=2816, moe_intermediate_size=256, num_hidden_layers=12,
                    num_attention_heads=16, num_key_value_heads=16, q_lora_rank=384, kv_lora_rank=512,
                    qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=16,
                    num_experts_per_tok=4, n_group=4, topk_group=2, max_position_embeddings=16384)  # fmt: skip
# SGLang's fused MoE computes fp32 in fp16/tf32, so a few tokens may still flip an expert
# (this model on CPU, all-fp16 vs fp32: <= 1.3% of tokens, worst 0.96, 15% of the max);
# a layer one off fails on every token.
_DEEPSEEK_TOLERANCE = {"cosine": 0.999, "bad_fraction": 0.02, "floor": 0.9, "rel_abs": 0.3}
# Per model: config.json over runner/assets/tiny_<arch>.json, dtype, SGLang flags, tolerance;
# "variants": SGLang runs beyond "graphs" (see run_plan).
# Tolerance, per layer: a token is bad below ``cosine``; at most ``bad_fraction`` bad tokens,
# none below ``floor``; max abs difference <= ``rel_abs`` x the reference's largest value
# (scale errors, which cosine cannot see). Layers i and i+1 differ by cosine 0.6-0.96 here.
MODELS = {
    "llama": {
        "dtype": "bfloat16",
        "config": _LLAMA,
        "sglang_args": [],
        # two bf16 implementations (CPU, eager vs sdpa): worst token 0.9993, 3% of the max
        "tolerance": {"cosine": 0.998, "bad_fraction": 0.0, "floor": 0.998, "rel_abs": 0.1},
    },
    "deepseek_v3": {
        "dtype": "float32",  # bf16 breaks near-tied expert scores differently per backend
        "config": _DEEPSEEK_V3,
        "sglang_args": ["--attention-backend", "triton"],  # FA3, Hopper's MLA default, has no fp32
        "tolerance": _DEEPSEEK_TOLERANCE,
    },
    "kimi_k25": {
        "dtype": "float32",
        "config": _DEEPSEEK_V3,
        "wraps": "deepseek_v3",  # that text model in Kimi-K2.5's wrapper layout (runner.data.targets.wrap_kimi)
        "trust_remote_code": True,  # as hsx serves Kimi-K2.5 (its tokenizer is remote code)
        "sglang_args": ["--attention-backend", "triton"],
        "tolerance": _DEEPSEEK_TOLERANCE,
        # the GPU-only hazards of Kimi-K2.5 (shared/notes/sglang-0.5.23-tp-kimi.md §5)
        "variants": ["eager", "no-fusion"],
    },
}
_MIXED = re.compile(r"Prefill batch(?: \[\d+\])?, #new-seq: (\d+)")
# SGLang 0.5.23's own lines (model_runner_components/cuda_graph_setup.py, arg_groups/overrides.py).
_GRAPH_BEGIN = re.compile(r"Capture \w+ prefill CUDA graph begin\. backend=\S+, num_tokens=\[([\d, ]*)\]")
_GRAPH_END = re.compile(r"Capture \w+ prefill CUDA graph end\.")
_FUSION_ON = re.compile(r"Auto-enabling FlashInfer AllReduce Fusion")
_FUSION_OFF = re.compile(r"FlashInfer allreduce fusion is forcibly disabled")


# --- what is run ----------------------------------------------------------------------


def aux_id_sets(num_layers: int) -> list[list[int]]:
    """The default ids and each one layer later (e.g. [1, 5, 8] and [2, 6, 9] of 12)."""
    default = layers.default_aux_ids(num_layers)
    return [default, [i + 1 for i in default]]


def run_key(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def run_name(variant: str, ids: list[int]) -> str:
    return f"{variant} {run_key(ids)}"


def run_plan(arch: str, tp: int) -> list[tuple[str, list[int], list[str]]]:
    """One model's SGLang runs, as (name, aux ids, flags added to its arguments): "graphs" for
    each id set, then the model's variants at the default ids; "no-fusion" only at TP > 1."""
    spec = MODELS[arch]
    sets = aux_id_sets(spec["config"]["num_hidden_layers"])
    plan = [(run_name("graphs", ids), ids, VARIANTS["graphs"]) for ids in sets]
    for v in spec.get("variants", []):
        if v != "no-fusion" or tp > 1:
            plan.append((run_name(v, sets[0]), sets[0], VARIANTS[v]))
    return plan


def fusion_runs(arch: str, tp: int) -> tuple[str, str] | None:
    """The (fusion on, forced off) pair of runs whose dumps are compared with each other."""
    names = [name for name, _, _ in run_plan(arch, tp)]
    off = next((n for n in names if n.startswith("no-fusion ")), None)
    return (names[0], off) if off else None


def aux_names(ids: list[int]) -> list[str]:
    return [f"aux {i}" for i in ids]


def neighbour_names(a: list[int], b: list[int]) -> list[str]:
    return [f"aux {i} vs {j}" for i, j in zip(a, b, strict=True)]


def loss_mask(ids: list[int]) -> list[int]:
    return [0] * (len(ids) // 2) + [1] * (len(ids) - len(ids) // 2)


# --- comparing dumps ------------------------------------------------------------------


def leaked(meta_info: dict) -> bool:
    """Hidden states in the JSON response: any value under a *hidden_states key. SGLang answers
    a dump request with ``"hidden_states": []``, which holds none."""

    def holds(v) -> bool:
        if isinstance(v, (list, tuple, dict)):
            return any(holds(x) for x in (v.values() if isinstance(v, dict) else v))
        return v is not None

    return any(holds(v) for k, v in meta_info.items() if "hidden_states" in k)


def layer_stats(ref, out, cosine: float) -> dict:
    """Per-token comparison of two [seq, H] tensors; a NaN counts as the worst."""
    import torch

    x, y = ref.float(), out.float()
    cos = torch.nan_to_num(torch.nn.functional.cosine_similarity(x, y, dim=-1), nan=-1.0)
    return {
        "tokens": len(cos),
        "bad": int((cos < cosine).sum()),
        "min_cosine": float(cos.min()),
        "max_abs": float(torch.nan_to_num((x - y).abs(), nan=float("inf")).max()),
        "ref_max": float(x.abs().max()),
    }


def merge(a: dict, b: dict) -> dict:
    return {
        "tokens": a["tokens"] + b["tokens"],
        "bad": a["bad"] + b["bad"],
        "min_cosine": min(a["min_cosine"], b["min_cosine"]),
        "max_abs": max(a["max_abs"], b["max_abs"]),
        "ref_max": max(a["ref_max"], b["ref_max"]),
    }


def compare_samples(ref: dict, out: dict, names: list[str], cosine: float, final: bool = True) -> dict:
    """{layer: stats} of two loaded samples; ``names`` label the three aux slices."""
    for k in ("hidden_state", "aux_hidden_state"):
        if ref[k].shape != out[k].shape:
            raise ValueError(f"{k} shape {list(out[k].shape)}, reference {list(ref[k].shape)}")
    h = ref["hidden_state"].shape[-1]
    got = {"final": layer_stats(ref["hidden_state"][0], out["hidden_state"][0], cosine)} if final else {}
    for k, name in enumerate(names):
        sl = slice(k * h, (k + 1) * h)
        got[name] = layer_stats(ref["aux_hidden_state"][0, :, sl], out["aux_hidden_state"][0, :, sl], cosine)
    return got


def _load(dump_dir: str, rid: str) -> dict:
    from runner.codec.ckpt import load_sample
    from runner.codec.sink import file_checksum

    meta = dump.read_sidecar(dump_dir, rid)
    path = dump.data_path(dump_dir, rid)
    if file_checksum(path) != meta["checksum"]:
        raise ValueError(f"{path}: checksum differs from its sidecar")
    return load_sample(path, mmap=False)


def compare_dirs(ref_dir, out_dir, tag, batch, names, cosine, final=True) -> dict:
    """Compare the dumps of one batch in two directories; every unusable sample is a problem."""
    from runner.codec.ckpt import CorruptSample

    total: dict[str, dict] = {}
    problems, samples = [], 0
    for i, ids in enumerate(batch):
        rid = f"{tag}-{i}"
        try:
            a, b = _load(ref_dir, rid), _load(out_dir, rid)
            for s in (a, b):
                if s["input_ids"].tolist() != ids or s["loss_mask"].tolist() != loss_mask(ids):
                    raise ValueError("input_ids or loss_mask differ from the request")
            got = compare_samples(a, b, names, cosine, final)
        except (OSError, ValueError, dump.DumpError, CorruptSample) as e:
            problems.append(f"{rid}: {e}")
            continue
        samples += 1
        for k, v in got.items():
            total[k] = merge(total[k], v) if k in total else v
    return {"samples": samples, "problems": problems, "layers": total}


# --- what a server's log shows --------------------------------------------------------


def mixed_batches(log_text: str) -> bool:
    """Did SGLang ever prefill several new requests in one batch?"""
    return any(int(k) > 1 for k in _MIXED.findall(log_text))


def log_facts(log_text: str) -> dict:
    """What an SGLang run did that its name claims: prefill batches mixing requests, prefill
    CUDA graphs captured (and the largest captured batch, in tokens; larger ones run eager),
    the fused all-reduce + norm "on" (auto-enabled), "forced off" or "off"."""
    sizes = [int(t) for m in _GRAPH_BEGIN.findall(log_text) for t in m.split(",") if t.strip()]
    fusion = "forced off" if _FUSION_OFF.search(log_text) else "on" if _FUSION_ON.search(log_text) else "off"
    return {
        "mixed_batches": mixed_batches(log_text),
        "prefill_graphs": bool(_GRAPH_END.search(log_text)),
        "prefill_graph_max_tokens": max(sizes, default=None),
        "allreduce_fusion": fusion,
    }


# --- the verdict ----------------------------------------------------------------------


def layer_failures(s: dict, tol: dict) -> list[str]:
    out = []
    if s["tokens"] < 1:
        out.append("no tokens compared")
    if s["bad"] > tol["bad_fraction"] * s["tokens"]:
        out.append(f"{s['bad']} of {s['tokens']} tokens below cosine {tol['cosine']}")
    if not s["min_cosine"] >= tol["floor"]:
        out.append(f"worst token cosine {s['min_cosine']:.5f} < {tol['floor']}")
    if not s["max_abs"] <= tol["rel_abs"] * s["ref_max"]:
        out.append(f"max abs difference {s['max_abs']:.4g} > {tol['rel_abs']} x {s['ref_max']:.4g}")
    return out


def _coverage(what: str, run: dict | None, requests: int, names: list[str]) -> list[str]:
    """Everything was compared: every sample, every layer, no problem."""
    if not run:
        return [f"{what}: not compared"]
    if run.get("error"):  # its server did not start, or did not answer
        return [f"{what}: {run['error']}"]
    out = [f"{what}: {p}" for p in run.get("problems", [])]
    if run.get("samples") != requests:
        out.append(f"{what}: {run.get('samples')} of {requests} samples compared")
    out += [f"{what} {n}: missing" for n in names if n not in run.get("layers", {})]
    return out


def _run_failures(name: str, run: dict, fused: bool) -> list[str]:
    """The run did what its name says (read from its log); ``fused``: its fusion must be on."""
    variant, out = name.split(" ")[0], []
    if not run.get("mixed_batches"):
        out.append("no prefill batch mixed requests (see its server log)")
    if variant == "eager" and run.get("prefill_graphs") is not False:
        out.append("prefill CUDA graphs were captured: not an eager run")
    if variant != "eager" and run.get("prefill_graphs") is not True:
        out.append("no prefill CUDA graph was captured (see its server log): the graph path went unchecked")
    if variant == "no-fusion" and run.get("allreduce_fusion") != "forced off":
        out.append(f"the fused all-reduce + norm was not forced off ({run.get('allreduce_fusion')})")
    if fused and run.get("allreduce_fusion") != "on":
        out.append("SGLang did not turn the fused all-reduce + norm on (it does on sm90/sm100 at TP > 1):"
                   " the fused path went unchecked")  # fmt: skip
    return out


def verdict(report: dict) -> list[str]:
    """Every reason the check fails; empty when everything holds. Expectations come from
    MODELS and the run plan, not from the report, so a report that leaves something out fails."""
    n = report.get("requests") or 0
    fails = [] if n > 0 else ["no requests sent"]
    tp = report.get("tp")
    if not (isinstance(tp, int) and tp >= 1):
        fails.append(f"tp {tp!r}: not a tensor-parallel size")
        tp = 1
    for arch, spec in MODELS.items():
        m = report.get("models", {}).get(arch)
        if m is None or m.get("error"):
            fails.append(f"{arch}: {m['error'] if m else 'not checked'}")
            continue
        tol = spec["tolerance"]
        pair = fusion_runs(arch, tp)
        for name, ids, _ in run_plan(arch, tp):
            what, names = f"{arch} {name}", ["final", *aux_names(ids)]
            run = m.get("runs", {}).get(name)
            fails += _coverage(what, run, n, names)
            if run and not run.get("error"):
                fails += [f"{what}: {f}" for f in _run_failures(name, run, bool(pair) and name == pair[0])]
            for layer, s in (run or {}).get("layers", {}).items():
                fails += [f"{what} {layer}: {f}" for f in layer_failures(s, tol)]
        sets = aux_id_sets(spec["config"]["num_hidden_layers"])
        nb, names = m.get("neighbour"), neighbour_names(*sets)
        fails += _coverage(f"{arch} neighbour", nb, n, names)
        for name in names:
            if nb and name in nb.get("layers", {}) and not layer_failures(nb["layers"][name], tol):
                fails.append(f"{arch}: the tolerance passes reference {name}: a layer one off would pass")
        if pair:  # the difference itself is reported, not judged: each run is judged against the reference
            fails += _coverage(f"{arch} fusion on vs off", m.get("fusion"), n, ["final", *aux_names(sets[0])])
    t = report.get("throughput") or {}
    ratio = t.get("ratio")
    if t.get("error") or not isinstance(ratio, (int, float)) or not ratio >= MIN_RATIO:
        fails.append(
            f"throughput: {t.get('error') or f'c/a = patched / stock = {ratio}, need >= {MIN_RATIO}'}"
        )
    return fails


def summary(report: dict) -> str:
    """The one line to read: pass or fail, the tensor-parallel size, the throughput ratio."""
    t = report.get("throughput") or {}
    ratio = t.get("ratio")
    if isinstance(ratio, (int, float)):
        c_a = (f"c/a = {ratio:.3f} (patched {t['patched_tokens_per_s']:,.0f} / stock "
               f"{t['stock_tokens_per_s']:,.0f} prompt tokens/s; goal >= {MIN_RATIO})")  # fmt: skip
    else:
        c_a = f"c/a = n/a ({t.get('error') or 'not measured'}; goal >= {MIN_RATIO})"
    fails = report.get("failures") or []
    state = "ok" if report.get("ok") else f"FAIL ({len(fails)} failure{'s' if len(fails) != 1 else ''})"
    return f"gpu_check: {state}; tp {report.get('tp')}; {c_a}"
