"""The patched SGLang's dump path against stock SGLang: same tiny Llama, same prompts, one run.

    .venv/bin/python -m bench.patch [--tokens 2048] [--requests 16] [--concurrency 4]
                                    [--hidden 1024] [--layers 4] [--tp 1] [--dir D]

Three servers in turn on SGLang's CPU engine (the pinned venv, runner/sglang_cpu.py), each
warmed up with its own batch of prompts, then sent the same prompts (random token ids, fixed
seed) with the same number of requests in flight, max_new_tokens 1:

  a  stock, no hidden states: the ceiling (one prefill and one sampled token per request);
  b  stock with ``--enable-return-hidden-states`` and the same aux-capture flags as c, so each
     response carries the request's aux rows [seq, 3H] as JSON; the client reads and parses it;
  c  the patched server (python -m patches.sglang_dump): each request's sample [seq, 4H] is
     written to a dump dir on the same disk (fsynced) and the response carries metadata only;
     a request counts as done once its sidecar is on disk (the writer may finish after the
     response), as for the extractor.

Every server gets ``--disable-radix-cache`` (c requires it; a and b get it so none of them can
reuse a prefix). Request bodies are runner.contract.dump.request_body, serialised once; a sends the
same bytes with ``return_hidden_states`` false. The model is a Llama config written here,
loaded with ``--load-format dummy`` (random weights, nothing downloaded) and
``--skip-tokenizer-init`` (prompts are token ids). c must have written one data file and one
sidecar per request, of the expected size, and b must have returned [seq, 3H] rows per
request, or the bench fails. Servers are stopped by process group and the work dir (dumps
included) is removed, even on error; on error the server logs are kept.

Default size, H=1024 x 4 layers (intermediate 3H, 8 heads of 128, 2 KV heads; ~50M weights):
about 1,500-2,000 prompt tokens/s for a on a 2-core AMX box, so 16 requests of 2,048 tokens take
~15 s for a and c and ~100 s for b, 5-7 min with the three server starts. Compute grows as H^2
and the bytes only as H, so a bigger model here would hide the write and the JSON behind a
CPU's slow prefill, which a GPU would not; few layers keep bytes per FLOP high (hard for c/a).
Reported: samples/s and prompt tokens/s for each, c/a (goal >= 0.9) and c/b (goal >= 5), and
the 1-minute load average after each run (the box may be shared: a, b, c run one after another).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import aiohttp

from runner import sglang_cpu
from runner.contract import dump
from runner.ports import free_port
from runner.serve.server import READY_LINE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "tests", "sglang_cpu")  # the test-only sgl_kernel stand-in
START_TIMEOUT_S = 600.0


def write_model(path: str, hidden: int, layers: int, vocab: int, max_pos: int) -> None:
    """config.json only: --load-format dummy fills the weights at load time."""
    from transformers import LlamaConfig

    LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
        num_attention_heads=hidden // 128, num_key_value_heads=max(1, hidden // 512), head_dim=128,
        max_position_embeddings=max_pos, tie_word_embeddings=False, torch_dtype="bfloat16",
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(path)  # fmt: skip


def cpu_args(concurrency: int, tokens: int, tp: int = 1) -> list[str]:
    """runner/sglang_cpu.py's flags, with room for `concurrency` whole prompts in the KV pool."""
    args = sglang_cpu.server_section("llama", "", "", tp=tp)["extra_args"]
    args[args.index("--max-total-tokens") + 1] = str(concurrency * (tokens + 16))
    args[args.index("--max-running-requests") + 1] = str(concurrency)
    return args


def bodies(n: int, tokens: int, vocab: int, seed: int, prefix: str) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ids = [rng.randrange(vocab) for _ in range(tokens)]
        out.append(dump.request_body(f"{prefix}{i:05d}", ids, [1] * tokens))
    return out


def encode(reqs: list[dict], hidden_states: bool) -> list[bytes]:
    return [json.dumps({**r, "return_hidden_states": hidden_states}).encode() for r in reqs]


def start(argv: list[str], env: dict, log_path: str) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        # own process group: stop() kills the tokenizer manager, scheduler and detokenizer together
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip


def wait_ready(proc: subprocess.Popen, url: str, log_path: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with open(log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; log tail:\n{text[-3000:]}")
        if READY_LINE in text:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
        time.sleep(0.5)
    raise RuntimeError(f"server not ready after {START_TIMEOUT_S:g}s; see {log_path}")


def stop(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass


async def drive(url: str, payloads: list[bytes], concurrency: int, dump_dir: str | None = None):
    """Seconds for all requests, C in flight, each response read and parsed (inside the timing:
    for b the JSON is the cost under test); the parsed responses; bytes received. With
    ``dump_dir`` (c) a request also counts only once its sidecar is on disk: the patched server
    may answer before its writer threads have written the dump, as the extractor knows."""
    sem = asyncio.Semaphore(concurrency)
    got = 0

    async def one(http: aiohttp.ClientSession, body: bytes) -> dict:
        nonlocal got
        async with sem:
            async with http.post(
                url + "/generate", data=body, headers={"Content-Type": "application/json"}
            ) as r:
                raw = await r.read()
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {raw[:500]!r}")
        got += len(raw)  # the slot is free: the server takes the next request while we wait
        resp = json.loads(raw)
        if dump_dir is not None:
            await wait_dump(dump_dir, resp["meta_info"]["id"])
        return resp

    # a fresh connection per request: while the client parses b's JSON (seconds, holding the
    # event loop) the server closes idle keep-alive connections, and a reused one fails
    conn = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as http:
        t = time.perf_counter()
        out = await asyncio.gather(*(one(http, b) for b in payloads))
        return time.perf_counter() - t, out, got


async def wait_dump(dump_dir: str, rid: str, timeout_s: float = 120.0) -> None:
    """Until the sidecar exists (the data file is complete then); a failure note is an error."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(dump.sidecar_path(dump_dir, rid)):
        failed = os.path.join(dump_dir, f"{rid}.failed")
        if os.path.exists(failed):
            with open(failed) as f:
                raise RuntimeError(f"server could not dump {rid}: {f.read()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no dump for {rid} {timeout_s:g}s after its response")
        await asyncio.sleep(0.005)


def check_responses(mode: str, resps: list[dict], tokens: int, hidden: int) -> None:
    for r in resps:
        meta = r["meta_info"]
        assert meta["prompt_tokens"] == tokens, meta
        hs = meta.get("hidden_states")
        if mode == "b":  # the prefill's rows: one per prompt token, 3 aux layers wide
            assert hs and len(hs[0]) == tokens and len(hs[0][0]) == 3 * hidden, "b returned no aux rows"
        else:
            assert not hs, f"{mode} returned hidden states in JSON"


def check_dumps(dump_dir: str, rids: list[str], tokens: int, hidden: int) -> int:
    """Every request left its data file and sidecar, of at least the tensors' size; bytes on disk."""
    names = set(os.listdir(dump_dir))
    want = {os.path.basename(p(dump_dir, r)) for r in rids for p in (dump.data_path, dump.sidecar_path)}
    assert names == want, f"dump dir: {len(names)} files, want {len(want)} ({sorted(names ^ want)[:4]})"
    floor = tokens * 4 * hidden * 2  # bf16 hidden_state + aux_hidden_state
    total = 0
    for rid in rids:
        meta = dump.read_sidecar(dump_dir, rid)
        size = os.path.getsize(dump.data_path(dump_dir, rid))
        ok = meta["seq"] == tokens and meta["hidden_size"] == hidden and meta["bytes"] == size >= floor
        assert ok, (meta, size)
        total += size
    return total


def servers(a, python: str, work: str, dump_dir: str, aux_ids: list[int]) -> dict:
    """{mode: (argv, return_hidden_states)}; writes the model's config.json."""
    from runner.contract.launch import server_argv

    model = os.path.join(work, "model")
    write_model(model, a.hidden, a.layers, a.vocab, a.tokens + 64)
    extra = [*cpu_args(a.concurrency, a.tokens, a.tp), "--dtype", "bfloat16", "--load-format", "dummy"]
    extra.append("--skip-tokenizer-init")
    stock = [
        python, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1",
        "--port", str(a.port), "--tp-size", str(a.tp), "--dp-size", "1", "--mem-fraction-static", "0.85",
        "--disable-radix-cache", *extra,
    ]  # fmt: skip
    # b: the capture flags c runs with (server_argv adds them), so the JSON holds the aux rows
    capture = ["--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3"]
    capture += ["--return-aux-hidden-state-layer-ids", *map(str, aux_ids), "--enable-return-hidden-states"]
    patched = server_argv(
        python=python, model=model, host="127.0.0.1", port=a.port, tp_size=a.tp, dp_size=1,
        mem_fraction=0.85, aux_layer_ids=aux_ids, extra_args=extra,
    )  # fmt: skip
    return {"a": (stock, False), "b": ([*stock, *capture], True), "c": (patched, True)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2048, help="prompt length")
    ap.add_argument("--requests", type=int, default=16, help="timed requests per server")
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight, all three")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks, all three servers")
    ap.add_argument("--port", type=int, default=0, help="default: a free one")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="work dir parent; dumps go here")
    a = ap.parse_args()
    assert a.layers >= 4 and a.hidden % 512 == 0, "need >= 4 layers and a hidden size divisible by 512"
    python = sglang_cpu.python_of(os.path.join(ROOT, ".cache"))
    if python is None:
        raise SystemExit("the SGLang CPU venv is not built: python -m runner.sglang_cpu .cache")
    a.port = a.port or free_port()
    a.url = f"http://127.0.0.1:{a.port}"

    work = tempfile.mkdtemp(prefix="hsx-bench-patch-", dir=a.dir)
    dump_dir = os.path.join(work, "dump")
    aux_ids = [0, a.layers // 2 - 1, a.layers - 2]  # hsx ids: outputs of these decoder layers
    warm = bodies(a.concurrency, a.tokens, a.vocab, a.seed + 1, "warm")  # own prompts: no reuse
    timed = bodies(a.requests, a.tokens, a.vocab, a.seed, "bench")
    res: dict[str, dict] = {}
    ok = False
    try:
        runs = servers(a, python, work, dump_dir, aux_ids)
        env = {
            **os.environ,
            **sglang_cpu.ENV,
            **sglang_cpu.tp_env(a.tp),
            "PYTHONPATH": os.pathsep.join([ROOT, KERNELS]),
        }
        env |= {dump.DUMP_DIR_ENV: dump_dir, dump.DUMP_LAYERS_ENV: ",".join(map(str, aux_ids))}
        for mode, (argv, hs) in runs.items():
            log_path = os.path.join(work, f"server-{mode}.log")
            proc = start(argv, env, log_path)
            try:
                t0 = time.perf_counter()
                wait_ready(proc, a.url, log_path)
                up = time.perf_counter() - t0
                dumps = dump_dir if mode == "c" else None
                _, resps, _ = asyncio.run(drive(a.url, encode(warm, hs), a.concurrency, dumps))
                check_responses(mode, resps, a.tokens, a.hidden)
                dt, resps, got = asyncio.run(drive(a.url, encode(timed, hs), a.concurrency, dumps))
                check_responses(mode, resps, a.tokens, a.hidden)
                if mode == "c":  # before the server stops: a dump per request, whole, nothing else
                    rids = [r["rid"] for r in warm + timed]
                    on_disk = check_dumps(dump_dir, rids, a.tokens, a.hidden) / len(rids) / 1e6
            finally:
                stop(proc)
            res[mode] = {
                "samples_s": a.requests / dt,
                "tokens_s": a.requests * a.tokens / dt,
                "seconds": dt,
                "mb_per_response": got / a.requests / 1e6,
                "start_s": up,
                "load1": os.getloadavg()[0],
            }
            print(f"{mode}: {a.requests} requests in {dt:.1f} s (server up in {up:.0f} s)", flush=True)
        res["c"]["mb_per_dump"] = on_disk
        ok = True
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(dump_dir, ignore_errors=True)
            print(f"server logs kept in {work}")

    print(
        f"\nLlama H={a.hidden} x {a.layers} layers, bf16, TP {a.tp}, {a.tokens} tokens/prompt, "
        f"{a.requests} requests, {a.concurrency} in flight, aux ids {aux_ids}"
    )
    print(f"{'':42} {'samples/s':>10} {'tokens/s':>10} {'MB/resp':>8} {'load1':>6}")
    names = {"a": "stock, no hidden states", "b": "stock, hidden states as JSON", "c": "patched, dump"}
    for mode, r in res.items():
        print(
            f"{mode}  {names[mode]:<39} {r['samples_s']:>10.3f} {r['tokens_s']:>10.0f} "
            f"{r['mb_per_response']:>8.3f} {r['load1']:>6.1f}"
        )
    ca, cb = res["c"]["samples_s"] / res["a"]["samples_s"], res["c"]["samples_s"] / res["b"]["samples_s"]
    print(
        f"c/a {ca:.3f} (goal >= 0.9)   c/b {cb:.2f} (goal >= 5)   dump {res['c']['mb_per_dump']:.1f} MB/sample"
    )
    figures = {
        "hidden": a.hidden, "layers": a.layers, "tp": a.tp, "tokens": a.tokens, "requests": a.requests,
        "concurrency": a.concurrency, "aux_layer_ids": aux_ids, "c_over_a": ca, "c_over_b": cb, **res,
    }  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
