"""GPU check of the dump patch (needs SGLang 0.5.23 and CUDA GPUs; nothing is downloaded).

    python -m bench.gpu_check --workdir /tmp/hsx-gpu [--tp 8] [--tokens 4096] [--requests 24]

1. Writes three random models (fixed seed, safetensors, 12 layers) to WORKDIR: a Llama (bf16),
   a DeepSeek-V3 (fp32; MLA, MoE with a shared expert, first layer dense) and that DeepSeek-V3
   in Kimi-K2.5's wrapper layout (runner.data.targets.wrap_kimi; SGLang loads it as
   KimiK25ForConditionalGeneration, served text-only through runner.serve.server.text_only, as hsx
   serves it).
2. Every SGLang server runs at --tp (tensor-parallel size, default 1). For each model and each
   aux id set, the default [1, 5, 8] and [2, 6, 9] (smallest id not 1: DeepSeek's own rule was
   one off there), serves it with the reference backend (runner.serve.reference_server, transformers
   on one GPU) and with the patched SGLang at its defaults, run "graphs" (prefill CUDA graphs
   on, the GPU default; small --chunked-prefill-size: long prompts are chunked, batches mix
   requests), sends the same token ids to both and compares every dump, per layer (final norm
   and each aux layer): worst per-token cosine, max abs difference, tokens below the bound.
3. Kimi-K2.5 at the default ids also runs "eager" (--disable-prefill-cuda-graph) and, at
   TP > 1, "no-fusion" (--enforce-disable-flashinfer-allreduce-fusion; its "graphs" run has
   SGLang's fused FlashInfer all-reduce + add + RMSNorm, auto-on on sm90/sm100). Both must
   pass against the reference; the report also gives how far the fused and unfused runs'
   dumps are apart, per layer. At TP 1 the fusion check is skipped (there is no all-reduce).
   Each run's log must show what its name says: prefill graphs captured (none when eager),
   the fusion on or forced off, prefill batches mixing requests.
4. Sensitivity: the two reference runs hold layers i and i+1 for the same tokens; the
   tolerance must reject that pair, else a capture one layer off would pass unseen.
5. Throughput: prompt tokens/s (max_new_tokens=1, same concurrency) of the patched server,
   counted until every dump is on disk, against stock SGLang with the same arguments minus
   the patch (Llama, at --tp). Goal: c/a = patched / stock >= 0.9.
Prints one JSON report (also WORKDIR/report.json), then a summary line with the tp and c/a,
and exits 0 only if every check holds. What is judged, and how: bench/gpu_check/judge.py.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from runner.contract import dump
from runner.contract.launch import server_argv
from runner.serve.server import text_only

from .judge import (
    FUSION_SKIPPED,
    MODELS,
    aux_id_sets,
    aux_names,
    compare_dirs,
    fusion_runs,
    leaked,
    log_facts,
    loss_mask,
    neighbour_names,
    run_key,
    run_plan,
    summary,
    verdict,
)

VOCAB = 32000
REF_DEVICE = "cuda"


# --- models and command lines ---------------------------------------------------------


def prompts(n: int, max_tokens: int, seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    lengths = [rng.randint(16, max_tokens) for _ in range(n)]
    lengths[:2] = [max_tokens, 5][:n]  # one at the limit (chunked), one tiny
    # below VOCAB - 1: the Kimi wrapper's media placeholder id, which text must not hold
    return [[rng.randrange(3, VOCAB - 1) for _ in range(k)] for k in lengths]


def build_model(arch: str, out_dir: str, config: dict | None = None, vocab_size: int = VOCAB) -> None:
    """MODELS[arch] as safetensors in out_dir (kept if there; built aside, then renamed in).
    A wrapper ("wraps"): its text model is built aside too, then wrapped."""
    from runner.data.tiny import build_model as build

    if os.path.exists(os.path.join(out_dir, "config.json")):
        return
    spec = MODELS[arch]
    tmp, text = out_dir + ".part", out_dir + ".text"
    for d in (tmp, text):
        shutil.rmtree(d, ignore_errors=True)
    wraps = spec.get("wraps")
    build(0, vocab_size, text if wraps else tmp, wraps or arch, spec["dtype"],
          overrides=config or spec["config"], random_norms=True)  # fmt: skip
    if wraps:
        from runner.data.targets import wrap_kimi

        wrap_kimi(text, tmp, 0, spec["dtype"])
        shutil.rmtree(text)
    os.replace(tmp, out_dir)


def encoder_args(model_dir: str, tp: int) -> list[str]:
    """The Kimi wrapper's tiny vision tower (2 heads; at width 16 its rope allows at most 4)
    cannot be split over more ranks than it has heads: SGLang asserts while loading. Then it
    is replicated instead (--mm-enable-dp-encoder); text requests never run it. Kimi-K2.5's
    own tower (16 heads) splits at TP 8, so hsx passes nothing."""
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            heads = (json.load(f).get("vision_config") or {}).get("num_attention_heads")
    except (OSError, ValueError, AttributeError):
        return []  # SGLang reports an unreadable model
    return ["--mm-enable-dp-encoder"] if heads and heads % tp else []


def patched_argv(arch: str, model: str, port: int, ids: list[int], tp: int, common: list[str],
                 flags: list[str] | None = None) -> list[str]:  # fmt: skip
    """The patched server as hsx starts it (runner.serve.server.build_argv): a wrapper text-only."""
    spec = MODELS[arch]
    extra = [*common, "--dtype", spec["dtype"], *spec["sglang_args"], *(flags or [])]
    extra += encoder_args(model, tp)
    return server_argv(python=sys.executable, model=model, host="127.0.0.1", port=port, tp_size=tp,
                       dp_size=1, mem_fraction=0.7, aux_layer_ids=ids, extra_args=text_only(model, extra),
                       trust_remote_code=spec.get("trust_remote_code", False))  # fmt: skip


def reference_argv(arch: str, model: str, port: int, dump_dir: str) -> list[str]:
    spec = MODELS[arch]
    remote = ["--trust-remote-code"] if spec.get("trust_remote_code") else []
    return [sys.executable, "-m", "runner.serve.reference_server", "--model", model, "--port", str(port),
            "--dump-dir", dump_dir, "--device", REF_DEVICE, "--dtype", spec["dtype"], *remote]  # fmt: skip


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


# --- the run --------------------------------------------------------------------------


def _fresh(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)  # dumps left by an earlier run must not be compared
    os.makedirs(path)
    return path


def _slug(name: str) -> str:
    return name.replace(" ", "-").replace(",", "-")


def sglang_run(arch: str, a, model: str, ref: str, out: str, ids, flags, batch, common, ports) -> dict:
    """One patched SGLang run compared with the reference's dumps, and what its log shows."""
    port, spec = next(ports), MODELS[arch]
    env = {dump.DUMP_LAYERS_ENV: run_key(ids), dump.DUMP_DIR_ENV: out}
    with Server(patched_argv(arch, model, port, ids, a.tp, common, flags), port, f"{out}.log", env):
        run_requests(port, batch, "cmp", out, a.concurrency)
    run = {
        "flags": list(flags),
        **compare_dirs(ref, out, "cmp", batch, aux_names(ids), spec["tolerance"]["cosine"]),
    }
    with open(f"{out}.log", errors="replace") as f:
        return {**run, **log_facts(f.read())}


def check_model(arch: str, a, batch: list[list[int]], common: list[str], ports) -> dict:
    spec = MODELS[arch]
    root = os.path.join(a.workdir, arch)
    model = os.path.join(root, "model")
    build_model(arch, model)
    tol = spec["tolerance"]
    entry: dict = {"dtype": spec["dtype"], "tolerance": tol, "runs": {}}
    sets = aux_id_sets(spec["config"]["num_hidden_layers"])
    refs = {}
    for ids in sets:  # the reference first: every SGLang run at these ids is compared with it
        key = run_key(ids)
        ref, port = _fresh(os.path.join(root, f"ref-{_slug(key)}")), next(ports)
        with Server(reference_argv(arch, model, port, ref), port, f"{ref}.log", {dump.DUMP_LAYERS_ENV: key}):
            run_requests(port, batch, "cmp", ref, 1)
        refs[key] = ref
    outs = {}
    for name, ids, flags in run_plan(arch, a.tp):
        outs[name] = _fresh(os.path.join(root, f"sgl-{_slug(name)}"))
        args = (arch, a, model, refs[run_key(ids)], outs[name], ids, flags, batch, common, ports)
        entry["runs"][name] = _guarded(sglang_run, *args)  # one that fails to start: the others still run
    entry["neighbour"] = compare_dirs(
        *refs.values(), "cmp", batch, neighbour_names(*sets), tol["cosine"], final=False
    )
    pair = fusion_runs(arch, a.tp)
    if pair:
        on, off = pair
        diff = compare_dirs(outs[on], outs[off], "cmp", batch, aux_names(sets[0]), tol["cosine"])
        entry["fusion"] = {"on": on, "off": off, **diff}
    elif "no-fusion" in spec.get("variants", []):
        entry["fusion"] = {"skipped": FUSION_SKIPPED}
    return entry


def throughput(a, batch: list[list[int]], common: list[str], ports) -> dict:
    spec = MODELS["llama"]
    model = os.path.join(a.workdir, "llama", "model")
    ids = aux_id_sets(spec["config"]["num_hidden_layers"])[0]
    out = _fresh(os.path.join(a.workdir, "llama", "dump-tput"))
    port = next(ports)
    patched = patched_argv("llama", model, port, ids, a.tp, common)
    env = {dump.DUMP_DIR_ENV: out, dump.DUMP_LAYERS_ENV: run_key(ids)}
    with Server(patched, port, f"{out}.log", env):
        run_requests(port, batch, "warm", out, a.concurrency)
        got = {"patched_tokens_per_s": run_requests(port, batch, "tput", out, a.concurrency)}
    port = next(ports)
    with Server(stock_argv(patched, port), port, os.path.join(a.workdir, "llama", "stock.log")):
        run_requests(port, batch, "warm", None, a.concurrency)
        got["stock_tokens_per_s"] = run_requests(port, batch, "tput", None, a.concurrency)
    got["ratio"] = got["patched_tokens_per_s"] / got["stock_tokens_per_s"]  # c/a
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
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size of every SGLang server")
    p.add_argument("--tokens", type=int, default=4096, help="longest prompt")
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--chunk", type=int, default=1024, help="--chunked-prefill-size of every SGLang server")
    p.add_argument("--port", type=int, default=31000)
    a = p.parse_args(argv)
    if a.tokens < 16 or a.requests < 1 or a.tp < 1:
        p.error("need --tokens >= 16, --requests >= 1 and --tp >= 1")
    os.makedirs(a.workdir, exist_ok=True)
    batch = prompts(a.requests, a.tokens)
    common = ["--skip-tokenizer-init", "--chunked-prefill-size", str(a.chunk),
              "--context-length", str(a.tokens + 16)]  # fmt: skip
    ports = iter(range(a.port, a.port + 10_000, 10))  # apart: SGLang also takes ports near its own
    report: dict = {"tp": a.tp, "requests": a.requests, "longest": a.tokens, "chunk": a.chunk, "models": {}}
    for arch in MODELS:
        report["models"][arch] = _guarded(check_model, arch, a, batch, common, ports)
    report["throughput"] = _guarded(throughput, a, batch, common, ports)
    report["failures"] = verdict(report)
    report["ok"] = not report["failures"]
    report["summary"] = summary(report)
    text = json.dumps(report, indent=2)
    with open(os.path.join(a.workdir, "report.json"), "w") as f:
        f.write(text + "\n")
    print(text, flush=True)
    print(report["summary"], file=sys.stderr)  # last, apart from the JSON on stdout
    return 0 if report["ok"] else 1
