"""hsx's regeneration ÷ the server's own capacity (a bare client), and ÷ SpecForge's regeneration
script, on one server, the same rows, in one run.

    .venv/bin/python -m bench.regenerate [--rows 48] [--max-new-tokens 32] [--concurrency 8]
        [--repeats 2] [--backend auto|sglang|reference] [--specforge-script PATH]

The demo's tiny target and conversations (runner/data/demo_assets), served by the real SGLang on
the CPU lane when its venv is built (.cache/sglang-cpu-*), else by the reference backend. One
server, started as hsx's regeneration starts it (``server_for``: its argv and env), serves every
run: on a shared box the load drifts by several times within minutes, so runs on one server,
back to back, compare where runs on servers of their own would not. Each run sends the same
rows, rows in flight, max_new_tokens, greedy, after SGLang's prefix cache is flushed:

* hsx: the regeneration supervisor's own run (``Regenerate.run``: its workers, each row
  committed to rows.jsonl and fsynced, its record, the output written), in this process, its
  server start skipped (the server is already up at its [server] url); completion tokens from
  rows.jsonl, over the first row begun to the last row committed (rows.jsonl's mtime);
* bare: an aiohttp client sending the same /generate requests (each turn rendered with the chat
  template after the target's own earlier answers, hsx's sampling params), nothing else; timed
  from its first request to its last answer;
* specforge (``--specforge-script``, SGLang only: the reference backend has no
  /v1/chat/completions): SpecForge's scripts/regenerate_train_data.py, copied to a temp dir with
  its sibling conversation_validation.py and run as its docstring says, with the lane's
  interpreter (it has ``openai``), on the demo's data.jsonl (the ShareGPT JSONL it reads); timed
  as its process's wall less the same script's ``--help`` (interpreter and imports), so from its
  first request (its own 1-token probe) to its exit. It keeps no token counts: its answers are
  encoded again with the target's tokenizer (the end-of-turn token it drops is not counted).
  From a SpecForge checkout (or a git dir D: ``git -C D show HEAD:scripts/NAME > DIR/NAME`` for
  regenerate_train_data.py and conversation_validation.py), pass DIR/regenerate_train_data.py.

Rounds run hsx, bare, specforge, then the other way round (ABBA), ``--repeats`` times; each
ratio is the median of the rounds', beside the ratio of the medians. Client CPU seconds per run
are printed: on a 2-core box the client and the CPU server share the cores. Prints a line per
run, the ratios, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import aiohttp

from runner import sglang_cpu
from runner.contract.config import load
from runner.data import demo_assets
from runner.data.dataset import load_tokenizer
from runner.regenerate import committed
from runner.regenerate.supervisor import Regenerate, server_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIBLING = "conversation_validation.py"  # the script imports it from its own folder
GOAL = {"bare": 0.95, "specforge": 1.0}


def build(work: str, rows: int, backend: str) -> str:
    """The demo in ``work``; its hsx.toml, with room for every row's prompt (SpecForge cuts none)."""
    server = None
    if backend == "sglang":
        py = sglang_cpu.python_of(os.path.join(ROOT, ".cache"))
        server = sglang_cpu.server_section("llama", py, os.path.join(ROOT, "tests", "sglang_cpu"))
    conf = demo_assets.build(work, rows, 0, server=server)
    with open(conf) as f:
        text = f.read()
    for key, name in (("model", "model"), ("dataset", "data.jsonl")):  # each run's config is elsewhere
        text = text.replace(f'{key} = "{name}"', f'{key} = "{os.path.join(work, name)}"')
    return re.sub(r"(?m)^max_length = \d+$", "max_length = 4096", text)


def config(base: str, root: str, max_new: int, concurrency: int) -> str:
    os.makedirs(root)
    path = os.path.join(root, "hsx.toml")
    with open(path, "w") as f:
        f.write(base + f'\n[regenerate]\nrun_dir = "{root}/run"\noutput = "{root}/out.jsonl"\n'
                f"max_new_tokens = {max_new}\nconcurrency = {concurrency}\n")  # fmt: skip
    return path


class _OnServer(Regenerate):
    """hsx's regeneration on the server already up at its [server] url, timed from its first row."""

    first = cpu = 0.0  # wall clock (as rows.jsonl's mtime) and CPU time at the first row begun

    async def up(self, server) -> None:
        pass  # the bench's server: the same command, already started

    async def _row(self, *a):
        if not self.first:
            self.first, self.cpu = time.time(), time.process_time()
        return await super()._row(*a)


async def _hsx(conf: str) -> dict:
    cfg = load(conf)
    root = cfg.regenerate.run_dir
    os.makedirs(root)
    g = _OnServer(root, cfg)
    end = await g.run()
    cpu = time.process_time() - g.cpu
    log = os.path.join(root, "rows.jsonl")
    done = committed.read(log, g.rec.d["total"])
    assert end == "done" and done.failed == 0, (end, g.rec.d.get("last_error"))
    tokens = done.tokens
    span = os.stat(log).st_mtime - g.first
    return {"tokens": tokens, "s": span, "tokens_per_s": tokens / span, "cpu_s": cpu,
            "record_tokens_per_s": g.rec.d["tokens_per_s"]}  # fmt: skip


async def _bare(url: str, conf: str, tok, rows: list[dict]) -> dict:
    cfg = load(conf)
    trim = set(tok.all_special_ids)
    todo = iter(rows)
    tokens = 0

    async def worker(http) -> None:
        nonlocal tokens
        for row in todo:
            msgs = []
            for m in row["conversations"]:
                if m["role"] != "assistant":
                    msgs.append(m)
                    continue
                text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
                ids = tok(text, add_special_tokens=False)["input_ids"]
                room = cfg.job.max_length - len(ids)  # as hsx: never past max_length
                params = {"max_new_tokens": min(cfg.regenerate.max_new_tokens, room), "temperature": 0.0,
                          "top_p": 1.0, "top_k": -1}  # fmt: skip
                async with http.post(
                    url + "/generate", json={"input_ids": ids, "sampling_params": params}
                ) as r:
                    r.raise_for_status()
                    out = (await r.json())["output_ids"]
                tokens += len(out)
                while out and out[-1] in trim:  # as hsx: the next turn's prompt is the same
                    out.pop()
                msgs.append({"role": "assistant", "content": tok.decode(out).strip()})

    cpu = time.process_time()
    async with aiohttp.ClientSession() as http:
        t0 = time.monotonic()
        await asyncio.gather(*(worker(http) for _ in range(cfg.regenerate.concurrency)))
        span = time.monotonic() - t0
    return {"tokens": tokens, "s": span, "tokens_per_s": tokens / span, "cpu_s": time.process_time() - cpu}


def specforge_copy(script: str, into: str) -> str:
    """The script and its sibling in ``into`` (SpecForge's code is never kept in this repo)."""
    sibling = os.path.join(os.path.dirname(os.path.abspath(script)), SIBLING)
    if not os.path.isfile(sibling):
        raise SystemExit(f"--specforge-script: no {SIBLING} beside {script} (it imports it)")
    os.makedirs(into)
    for f in (script, sibling):
        shutil.copy(f, into)
    return os.path.join(into, os.path.basename(script))


def _child(argv: list[str], log: str) -> tuple[float, float]:
    """Wall and CPU seconds of a child process."""
    r0, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    with open(log, "ab") as f:
        subprocess.run(argv, check=True, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic() - t, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime


async def _specforge(url: str, conf: str, tok, script: str, python: str) -> dict:
    cfg = load(conf)
    root = os.path.dirname(conf)
    out, log = os.path.join(root, "specforge.jsonl"), os.path.join(root, "specforge.log")
    start, start_cpu = _child([python, script, "--help"], log)  # its interpreter and imports
    argv = [python, script, "--model", cfg.job.model, "--concurrency", str(cfg.regenerate.concurrency),
            "--max-tokens", str(cfg.regenerate.max_new_tokens), "--temperature", "0",
            "--server-address", url.removeprefix("http://"), "--input-file-path", cfg.job.dataset,
            "--output-file-path", out]  # fmt: skip
    wall, cpu = await asyncio.to_thread(_child, argv, log)
    with open(out) as f:
        got = [json.loads(line) for line in f]
    with open(cfg.job.dataset, "rb") as f:
        assert len(got) == sum(1 for _ in f) and all(r["status"] == "success" for r in got), log
    answers = [m["content"] for r in got for m in r["conversations"] if m["role"] == "assistant"]
    tokens = sum(len(tok(a, add_special_tokens=False)["input_ids"]) for a in answers)
    span = wall - start
    return {"tokens": tokens, "s": span, "tokens_per_s": tokens / span, "cpu_s": cpu - start_cpu}


def measure(base: str, work: str, a, kinds: list[str], script: str, python: str) -> dict[str, list[dict]]:
    """Every run on one server; rounds in ABBA order, the prefix cache flushed before each run."""
    cfg = load(os.path.join(work, "demo", "hsx.toml"))
    tok = load_tokenizer(cfg.job.model, cfg.job.trust_remote_code)
    with open(cfg.job.dataset) as f:
        rows = [json.loads(line) for line in f]
    runs: dict[str, list[dict]] = {k: [] for k in kinds}

    async def rounds(url: str) -> None:
        for i in range(a.repeats):
            for k in kinds if i % 2 == 0 else kinds[::-1]:
                async with aiohttp.ClientSession() as http, http.post(url + "/flush_cache") as r:
                    assert r.status in (200, 404), r.status  # 404: the reference backend, no cache
                conf = config(base, os.path.join(work, f"{k}-{i}"), a.max_new_tokens, a.concurrency)
                got = await (_hsx(conf) if k == "hsx" else _bare(url, conf, tok, rows) if k == "bare"
                             else _specforge(url, conf, tok, script, python))  # fmt: skip
                got["load1"] = os.getloadavg()[0]
                runs[k].append(got)
                print(f"round {i + 1} {k:9}: {got['tokens']} tokens in {got['s']:.2f} s = {got['tokens_per_s']:.1f} "
                      f"tokens/s, client CPU {got['cpu_s']:.2f} s, load {got['load1']:.2f}", flush=True)  # fmt: skip

    async def served() -> None:
        server = server_for(cfg, os.path.join(work, "server"))
        await server.start()
        try:
            await server.wait_ready()
            await rounds(server.url)
        finally:
            await asyncio.to_thread(server.stop)

    asyncio.run(served())
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.regenerate", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=48, help="the demo's conversations (1-3 answers each)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8, help="rows (requests) in flight, every client")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--backend", choices=("auto", "sglang", "reference"), default="auto")
    p.add_argument(
        "--specforge-script", help=f"SpecForge's scripts/regenerate_train_data.py, its {SIBLING} beside it"
    )
    p.add_argument("--specforge-python", help="an interpreter with openai and tqdm (default: the lane's)")
    p.add_argument("--dir", default=tempfile.gettempdir())
    a = p.parse_args(argv)
    lane = sglang_cpu.python_of(os.path.join(ROOT, ".cache"))
    backend = ("sglang" if lane else "reference") if a.backend == "auto" else a.backend
    if backend == "sglang" and not lane:
        p.error("no SGLang CPU venv in .cache (python -m runner.sglang_cpu builds it)")
    if a.specforge_script and backend != "sglang":
        p.error("SpecForge's script needs /v1/chat/completions, which only SGLang serves")
    load0 = os.getloadavg()
    work = tempfile.mkdtemp(prefix="hsx-bench-regen-", dir=a.dir)
    try:
        base = build(os.path.join(work, "demo"), a.rows, backend)
        kinds = ["hsx", "bare"] + (["specforge"] if a.specforge_script else [])
        script = specforge_copy(a.specforge_script, os.path.join(work, "sf")) if a.specforge_script else ""
        python = a.specforge_python or load(os.path.join(work, "demo", "hsx.toml")).server.python
        runs = measure(base, work, a, kinds, script, python)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load1 = os.getloadavg()
    med = {k: statistics.median(r["tokens_per_s"] for r in v) for k, v in runs.items()}
    ratios = {b: [h["tokens_per_s"] / r["tokens_per_s"] for h, r in zip(runs["hsx"], runs[b], strict=True)]
              for b in kinds[1:]}  # fmt: skip
    print(
        f"{backend} server, {a.rows} rows, {a.concurrency} in flight, max_new_tokens {a.max_new_tokens}, greedy"
    )
    for b, rs in ratios.items():
        print(f"hsx / {b}: {statistics.median(rs):.3f} (rounds {', '.join(f'{r:.3f}' for r in rs)}; of the "
              f"medians {med['hsx'] / med[b]:.3f}; goal >= {GOAL[b]})")  # fmt: skip
    cpu = {k: statistics.median(r["cpu_s"] / r["s"] for r in v) for k, v in runs.items()}
    print(
        "client CPU over the run (median): "
        + ", ".join(f"{k} {100 * c:.1f}% of a core" for k, c in cpu.items())
    )
    print(f"load average {' '.join(f'{x:.2f}' for x in load0)} at the start, "
          f"{' '.join(f'{x:.2f}' for x in load1)} at the end")  # fmt: skip
    report = {"backend": backend, "rows": a.rows, "concurrency": a.concurrency, "max_new_tokens": a.max_new_tokens,
              "repeats": a.repeats, "load": [load0, load1], "tokens_per_s": med,
              "ratio": {b: statistics.median(rs) for b, rs in ratios.items()}, "round_ratios": ratios,
              "client_core_share": cpu, "runs": runs}  # fmt: skip
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
