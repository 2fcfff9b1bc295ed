"""GPU check of the dump patch (needs SGLang 0.5.23 and a CUDA GPU; nothing is downloaded).

    python -m patches.gpu_check --workdir /tmp/hsx-gpu [--tokens 8192] [--requests 32]

1. Writes a small Llama (random "dummy" weights from a fixed seed, safetensors, bf16) to WORKDIR.
2. Serves it with the reference backend (runner.reference_server, transformers on the GPU) and
   with the patched SGLang (patches.sglang_dump, small --chunked-prefill-size so long prompts
   are chunked and batches mix requests); sends the same token ids to both and compares every
   dump: same seq and ids, mean per-token cosine >= 0.99 per layer (final norm and each aux
   layer; the worst token is reported too).
3. Measures prefill throughput (prompt tokens/s, max_new_tokens=1, same concurrency) of the
   patched server with dumps against stock SGLang with the same arguments minus the patch.
   Goal: patched / stock >= 0.9.
Prints one JSON report and exits 0 only if every check holds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from runner import dump

from .sglang_dump import server_argv

AUX_IDS = [1, 4, 7]  # of 12 layers
LAYERS = ("final", "aux0", "aux1", "aux2")


def build_model(path: str, seed: int = 0) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if os.path.exists(os.path.join(path, "config.json")):
        return
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
        num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=16384,
        torch_dtype="bfloat16", tie_word_embeddings=False,
    )  # fmt: skip
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path, safe_serialization=True)


def _post(url: str, body: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 900.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(2)
    raise RuntimeError(f"server on port {port} not healthy after {timeout:.0f} s")


class Server:
    def __init__(self, argv: list[str], port: int, log: str, env: dict | None = None):
        self.port = port
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                     start_new_session=True)  # fmt: skip

    def __enter__(self):
        _wait_healthy(self.port, self.proc)
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # our own session: the server and its children
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def prompts(n: int, max_tokens: int, seed: int = 1) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    lengths = [rng.randint(16, max_tokens) for _ in range(n)]
    lengths[:2] = [max_tokens, 5]  # one at the limit (chunked), one tiny
    return [[rng.randrange(3, 32000) for _ in range(k)] for k in lengths]


def run_requests(port: int, batch: list[list[int]], tag: str, dump_on: bool, concurrency: int) -> float:
    """Send all prompts concurrently; return prompt tokens per second."""

    def one(i_ids):
        i, ids = i_ids
        if dump_on:
            body = dump.request_body(f"{tag}-{i}", ids, [i % 2] * len(ids))
        else:
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
        out = _post(f"http://127.0.0.1:{port}/generate", body)
        if "hidden_states" in json.dumps(out.get("meta_info", {})):
            raise RuntimeError("hidden states came back through JSON")
        return out

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, enumerate(batch)))
    return sum(map(len, batch)) / (time.perf_counter() - t)


def compare(ref_dir: str, sgl_dir: str, tag: str, batch: list[list[int]]) -> dict:
    import torch

    from runner.ckpt import load_sample

    worst = dict.fromkeys(LAYERS, 1.0)
    sums, count = dict.fromkeys(LAYERS, 0.0), 0
    problems = []
    for i, ids in enumerate(batch):
        rid = f"{tag}-{i}"
        try:
            a = load_sample(dump.data_path(ref_dir, rid), mmap=False)
            b = load_sample(dump.data_path(sgl_dir, rid), mmap=False)
        except Exception as e:
            problems.append(f"{rid}: {e}")
            continue
        if b["input_ids"].tolist() != ids or b["hidden_state"].shape != a["hidden_state"].shape:
            problems.append(
                f"{rid}: ids or shape differ ({list(b['hidden_state'].shape)} vs {list(a['hidden_state'].shape)})"
            )
            continue
        h = a["hidden_state"].shape[-1]
        pairs = {"final": (a["hidden_state"], b["hidden_state"])}
        for k in range(3):
            pairs[f"aux{k}"] = (
                a["aux_hidden_state"][..., k * h : (k + 1) * h],
                b["aux_hidden_state"][..., k * h : (k + 1) * h],
            )
        count += 1
        for name, (x, y) in pairs.items():
            cos = torch.nn.functional.cosine_similarity(x[0].float(), y[0].float(), dim=-1)
            worst[name] = min(worst[name], cos.min().item())
            sums[name] += cos.mean().item()
    mean = {k: v / max(count, 1) for k, v in sums.items()}
    return {"mean_cosine": mean, "min_token_cosine": worst, "problems": problems}


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m patches.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--tokens", type=int, default=4096, help="longest prompt")
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--chunk", type=int, default=1024, help="--chunked-prefill-size of both SGLang servers")
    p.add_argument("--port", type=int, default=31000)
    a = p.parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)
    model = os.path.join(a.workdir, "model")
    build_model(model)
    ref_dir, sgl_dir = (os.path.join(a.workdir, d) for d in ("dump-ref", "dump-sgl"))
    for d in (ref_dir, sgl_dir):
        os.makedirs(d, exist_ok=True)
    batch = prompts(a.requests, a.tokens)
    ids_env = {dump.DUMP_LAYERS_ENV: ",".join(map(str, AUX_IDS))}
    common = [
        "--skip-tokenizer-init",
        "--chunked-prefill-size",
        str(a.chunk),
        "--context-length",
        str(a.tokens + 16),
    ]
    report: dict = {"aux_layer_ids": AUX_IDS, "requests": a.requests, "longest": a.tokens, "chunk": a.chunk}

    ref_argv = [sys.executable, "-m", "runner.reference_server", "--model", model, "--port", str(a.port),
                "--dump-dir", ref_dir, "--device", "cuda", "--dtype", "bfloat16"]  # fmt: skip
    with Server(ref_argv, a.port, os.path.join(a.workdir, "ref.log"), ids_env):
        run_requests(a.port, batch, "cmp", True, 1)

    patched = server_argv(python=sys.executable, model=model, host="127.0.0.1", port=a.port + 1, tp_size=1,
                          dp_size=1, mem_fraction=0.7, aux_layer_ids=AUX_IDS, extra_args=common)  # fmt: skip
    with Server(
        patched, a.port + 1, os.path.join(a.workdir, "sgl.log"), {dump.DUMP_DIR_ENV: sgl_dir, **ids_env}
    ):
        run_requests(a.port + 1, batch, "cmp", True, a.concurrency)  # the compared dumps, batched
        run_requests(a.port + 1, batch, "warm", True, a.concurrency)
        report["patched_tokens_per_s"] = run_requests(a.port + 1, batch, "tput", True, a.concurrency)
    report.update(compare(ref_dir, sgl_dir, "cmp", batch))

    stock = stock_argv(patched, a.port + 2)
    with Server(stock, a.port + 2, os.path.join(a.workdir, "stock.log")):
        run_requests(a.port + 2, batch, "warm", False, a.concurrency)
        report["stock_tokens_per_s"] = run_requests(a.port + 2, batch, "tput", False, a.concurrency)
    report["throughput_ratio"] = report["patched_tokens_per_s"] / report["stock_tokens_per_s"]
    report["ok"] = (
        not report["problems"]
        and all(v >= 0.99 for v in report["mean_cosine"].values())
        and report["throughput_ratio"] >= 0.9
    )
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
