"""GPU check of the dump patch (needs SGLang 0.5.23 and a CUDA GPU; nothing is downloaded).

    python -m bench.gpu_check --workdir /tmp/hsx-gpu [--tokens 4096] [--requests 24]

1. Writes two random models (fixed seed, safetensors) to WORKDIR: a Llama (bf16) and a
   DeepSeek-V3 (fp32; MLA, MoE with a shared expert, first layer dense), both 12 layers.
2. For each model and each aux id set, the default [1, 5, 8] and [2, 6, 9] (smallest id not 1:
   DeepSeek's own rule was one off there), serves it with the reference backend
   (runner.reference_server, transformers on the GPU) and with the patched SGLang (small
   --chunked-prefill-size: long prompts are chunked, batches mix requests), sends the same
   token ids to both and compares every dump, per layer (final norm and each aux layer):
   worst per-token cosine, max abs difference, tokens below the cosine bound.
3. Sensitivity: the two reference runs hold layers i and i+1 for the same tokens; the
   tolerance must reject that pair, else a capture one layer off would pass unseen.
4. Throughput: prompt tokens/s (max_new_tokens=1, same concurrency) of the patched server,
   counted until every dump is on disk, against stock SGLang with the same arguments minus
   the patch. Goal: patched / stock >= 0.9.
Prints one JSON report (also WORKDIR/report.json) and exits 0 only if every check holds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from runner import layers
from runner.contract import dump
from runner.contract.launch import server_argv

VOCAB = 32000
REF_DEVICE = "cuda"
MIN_RATIO = 0.9
_LLAMA = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=8,
              num_key_value_heads=8, head_dim=128, max_position_embeddings=16384)  # fmt: skip
# DeepSeek-V3's own head sizes (what its GPU kernels are built for), fewer and smaller experts.
_DEEPSEEK_V3 = dict(hidden_size=1024, intermediate_size=2816, moe_intermediate_size=256, num_hidden_layers=12,
                    num_attention_heads=16, num_key_value_heads=16, q_lora_rank=384, kv_lora_rank=512,
                    qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=16,
                    num_experts_per_tok=4, n_group=4, topk_group=2, max_position_embeddings=16384)  # fmt: skip
# Per model: config.json over runner/assets/tiny_<arch>.json, dtype, SGLang flags, tolerance.
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
        # SGLang's fused MoE computes fp32 in fp16/tf32, so a few tokens may still flip an expert
        # (this model on CPU, all-fp16 vs fp32: <= 1.3% of tokens, worst 0.96, 15% of the max);
        # a layer one off fails on every token.
        "tolerance": {"cosine": 0.999, "bad_fraction": 0.02, "floor": 0.9, "rel_abs": 0.3},
    },
}
_MIXED = re.compile(r"Prefill batch(?: \[\d+\])?, #new-seq: (\d+)")


# --- what is checked ------------------------------------------------------------------


def aux_id_sets(num_layers: int) -> list[list[int]]:
    """The default ids and each one layer later (e.g. [1, 5, 8] and [2, 6, 9] of 12)."""
    default = layers.default_aux_ids(num_layers)
    return [default, [i + 1 for i in default]]


def run_key(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def aux_names(ids: list[int]) -> list[str]:
    return [f"aux {i}" for i in ids]


def neighbour_names(a: list[int], b: list[int]) -> list[str]:
    return [f"aux {i} vs {j}" for i, j in zip(a, b, strict=True)]


def loss_mask(ids: list[int]) -> list[int]:
    return [0] * (len(ids) // 2) + [1] * (len(ids) - len(ids) // 2)


def prompts(n: int, max_tokens: int, seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    lengths = [rng.randint(16, max_tokens) for _ in range(n)]
    lengths[:2] = [max_tokens, 5][:n]  # one at the limit (chunked), one tiny
    return [[rng.randrange(3, VOCAB) for _ in range(k)] for k in lengths]


def build_model(arch: str, out_dir: str, config: dict | None = None, vocab_size: int = VOCAB) -> None:
    """MODELS[arch] as safetensors in out_dir (kept if there; built aside, then renamed in)."""
    from runner.demo_assets import build_model as build

    if os.path.exists(os.path.join(out_dir, "config.json")):
        return
    tmp = out_dir + ".part"
    shutil.rmtree(tmp, ignore_errors=True)
    build(
        0,
        vocab_size,
        tmp,
        arch,
        MODELS[arch]["dtype"],
        overrides=config or MODELS[arch]["config"],
        random_norms=True,
    )
    os.replace(tmp, out_dir)


# --- pure checks ----------------------------------------------------------------------


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
    out = [f"{what}: {p}" for p in run.get("problems", [])]
    if run.get("samples") != requests:
        out.append(f"{what}: {run.get('samples')} of {requests} samples compared")
    out += [f"{what} {n}: missing" for n in names if n not in run.get("layers", {})]
    return out


def verdict(report: dict) -> list[str]:
    """Every reason the check fails; empty when everything holds. Expectations come from
    MODELS, not from the report, so a report that leaves something out fails."""
    n = report.get("requests") or 0
    fails = [] if n > 0 else ["no requests sent"]
    for arch, spec in MODELS.items():
        m = report.get("models", {}).get(arch)
        if m is None or m.get("error"):
            fails.append(f"{arch}: {m['error'] if m else 'not checked'}")
            continue
        tol = spec["tolerance"]
        sets = aux_id_sets(spec["config"]["num_hidden_layers"])
        for ids in sets:
            what, names = f"{arch} ids {run_key(ids)}", ["final", *aux_names(ids)]
            run = m.get("runs", {}).get(run_key(ids))
            fails += _coverage(what, run, n, names)
            if run and not run.get("mixed_batches"):
                fails.append(f"{what}: no prefill batch mixed requests (see its server log)")
            for name, s in (run or {}).get("layers", {}).items():
                fails += [f"{what} {name}: {f}" for f in layer_failures(s, tol)]
        nb, names = m.get("neighbour"), neighbour_names(*sets)
        fails += _coverage(f"{arch} neighbour", nb, n, names)
        for name in names:
            if nb and name in nb.get("layers", {}) and not layer_failures(nb["layers"][name], tol):
                fails.append(f"{arch}: the tolerance passes reference {name}: a layer one off would pass")
    tp = report.get("throughput") or {}
    ratio = tp.get("ratio")
    if tp.get("error") or not isinstance(ratio, (int, float)) or not ratio >= MIN_RATIO:
        fails.append(f"throughput: {tp.get('error') or f'patched / stock = {ratio}, need >= {MIN_RATIO}'}")
    return fails


def mixed_batches(log_text: str) -> bool:
    """Did SGLang ever prefill several new requests in one batch?"""
    return any(int(k) > 1 for k in _MIXED.findall(log_text))


def stock_argv(patched: list[str], port: int) -> list[str]:
    """The same server without the patch and without aux capture: the throughput baseline."""
    args = patched[3:]
    flags = (
        "--enable-return-aux-hidden-states",
        "--speculative-algorithm",
        "--return-aux-hidden-state-layer-ids",
    )
    out, i = [sys.executable, "-m", "sglang.launch_server"], 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        if args[i] not in flags:
            out += [args[i], str(port)] if args[i] == "--port" else args[i:j]
        i = j
    return out


# --- servers and requests -------------------------------------------------------------


def _post(url: str, body: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Server:
    def __init__(self, argv: list[str], port: int, log: str, env: dict | None = None):
        self.port, self.log_path = port, log
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                     start_new_session=True)  # fmt: skip

    def __enter__(self):
        end = time.time() + 900
        while time.time() < end:
            if self.proc.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"server exited with {self.proc.returncode} (log: {self.log_path})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(2)
        self.__exit__()
        raise RuntimeError(f"server not healthy after 900 s (log: {self.log_path})")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # our own session: the server and its children
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def wait_for_dumps(dump_dir: str, rids: list[str], timeout: float = 600.0) -> None:
    """The patched SGLang may answer before its writer threads are done."""
    end = time.monotonic() + timeout
    while rids := [r for r in rids if dump.poll_dump(dump_dir, r) is None]:  # DumpError: gave up
        if time.monotonic() > end:
            raise RuntimeError(f"{len(rids)} dumps not written after {timeout:.0f} s, e.g. {rids[0]}")
        time.sleep(0.01)


def run_requests(
    port: int, batch: list[list[int]], tag: str, dump_dir: str | None, concurrency: int
) -> float:
    """Send all prompts concurrently; with dump_dir, as dump requests, waiting for every dump.
    Returns prompt tokens per second."""

    def one(i: int) -> None:
        ids = batch[i]
        if dump_dir:
            body = dump.request_body(f"{tag}-{i}", ids, loss_mask(ids))
        else:
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
        out = _post(f"http://127.0.0.1:{port}/generate", body)
        if leaked(out.get("meta_info") or {}):
            raise RuntimeError(f"{tag}-{i}: hidden states came back in the JSON response")

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(len(batch))))
    if dump_dir:
        wait_for_dumps(dump_dir, [f"{tag}-{i}" for i in range(len(batch))])
    return sum(map(len, batch)) / (time.perf_counter() - t)


def _load(dump_dir: str, rid: str) -> dict:
    from runner.contract.ckpt import file_checksum, load_sample

    meta = dump.read_sidecar(dump_dir, rid)
    path = dump.data_path(dump_dir, rid)
    if file_checksum(path) != meta["checksum"]:
        raise ValueError(f"{path}: checksum differs from its sidecar")
    return load_sample(path, mmap=False)


def compare_dirs(ref_dir, out_dir, tag, batch, names, cosine, final=True) -> dict:
    """Compare the dumps of one batch in two directories; every unusable sample is a problem."""
    from runner.contract.ckpt import CorruptSample

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


# --- the run --------------------------------------------------------------------------


def _fresh(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)  # dumps left by an earlier run must not be compared
    os.makedirs(path)
    return path


def _patched_argv(model: str, port: int, ids: list[int], spec: dict, common: list[str]) -> list[str]:
    return server_argv(python=sys.executable, model=model, host="127.0.0.1", port=port, tp_size=1,
                       dp_size=1, mem_fraction=0.7, aux_layer_ids=ids,
                       extra_args=[*common, "--dtype", spec["dtype"], *spec["sglang_args"]])  # fmt: skip


def check_model(arch: str, a, batch: list[list[int]], common: list[str], ports) -> dict:
    spec = MODELS[arch]
    root = os.path.join(a.workdir, arch)
    model = os.path.join(root, "model")
    build_model(arch, model)
    tol = spec["tolerance"]
    entry: dict = {"dtype": spec["dtype"], "tolerance": tol, "runs": {}}
    sets = aux_id_sets(spec["config"]["num_hidden_layers"])
    refs = []
    for ids in sets:
        key, env = run_key(ids), {dump.DUMP_LAYERS_ENV: run_key(ids)}
        ref, sgl = (_fresh(os.path.join(root, f"{side}-{key.replace(',', '-')}")) for side in ("ref", "sgl"))
        port = next(ports)
        ref_argv = [sys.executable, "-m", "runner.reference_server", "--model", model, "--port", str(port),
                    "--dump-dir", ref, "--device", REF_DEVICE, "--dtype", spec["dtype"]]  # fmt: skip
        with Server(ref_argv, port, f"{ref}.log", env):
            run_requests(port, batch, "cmp", ref, 1)
        port = next(ports)
        with Server(
            _patched_argv(model, port, ids, spec, common), port, f"{sgl}.log", {**env, dump.DUMP_DIR_ENV: sgl}
        ):
            run_requests(port, batch, "cmp", sgl, a.concurrency)
        run = compare_dirs(ref, sgl, "cmp", batch, aux_names(ids), tol["cosine"])
        with open(f"{sgl}.log", errors="replace") as f:
            run["mixed_batches"] = mixed_batches(f.read())
        entry["runs"][key] = run
        refs.append(ref)
    entry["neighbour"] = compare_dirs(*refs, "cmp", batch, neighbour_names(*sets), tol["cosine"], final=False)
    return entry


def throughput(a, batch: list[list[int]], common: list[str], ports) -> dict:
    spec = MODELS["llama"]
    model = os.path.join(a.workdir, "llama", "model")
    ids = aux_id_sets(spec["config"]["num_hidden_layers"])[0]
    out = _fresh(os.path.join(a.workdir, "llama", "dump-tput"))
    port = next(ports)
    patched = _patched_argv(model, port, ids, spec, common)
    env = {dump.DUMP_DIR_ENV: out, dump.DUMP_LAYERS_ENV: run_key(ids)}
    with Server(patched, port, f"{out}.log", env):
        run_requests(port, batch, "warm", out, a.concurrency)
        got = {"patched_tokens_per_s": run_requests(port, batch, "tput", out, a.concurrency)}
    port = next(ports)
    with Server(stock_argv(patched, port), port, os.path.join(a.workdir, "llama", "stock.log")):
        run_requests(port, batch, "warm", None, a.concurrency)
        got["stock_tokens_per_s"] = run_requests(port, batch, "tput", None, a.concurrency)
    got["ratio"] = got["patched_tokens_per_s"] / got["stock_tokens_per_s"]
    return got


def _guarded(fn, *args) -> dict:
    """One part's failure (a server that does not start) is reported; the other parts still run."""
    try:
        return fn(*args)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--tokens", type=int, default=4096, help="longest prompt")
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--chunk", type=int, default=1024, help="--chunked-prefill-size of every SGLang server")
    p.add_argument("--port", type=int, default=31000)
    a = p.parse_args(argv)
    if a.tokens < 16 or a.requests < 1:
        p.error("need --tokens >= 16 and --requests >= 1")
    os.makedirs(a.workdir, exist_ok=True)
    batch = prompts(a.requests, a.tokens)
    common = ["--skip-tokenizer-init", "--chunked-prefill-size", str(a.chunk),
              "--context-length", str(a.tokens + 16)]  # fmt: skip
    ports = iter(range(a.port, a.port + 10_000, 10))  # apart: SGLang also takes ports near its own
    report: dict = {"requests": a.requests, "longest": a.tokens, "chunk": a.chunk, "models": {}}
    for arch in MODELS:
        report["models"][arch] = _guarded(check_model, arch, a, batch, common, ports)
    report["throughput"] = _guarded(throughput, a, batch, common, ports)
    report["failures"] = verdict(report)
    report["ok"] = not report["failures"]
    text = json.dumps(report, indent=2)
    with open(os.path.join(a.workdir, "report.json"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
