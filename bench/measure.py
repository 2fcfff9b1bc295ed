"""The draft's measurement against SGLang's own figures and a bare client, in one run.

``python -m bench.measure --workdir W [--setting 3/1/4]`` with W an `hsx demo --backend sglang`
whose draft is trained and exported (`/train start` ends so), on the CPU lane; on a GPU box, any
job config with a `[measure]` section and an exported draft (``--config``).

Two fresh servers with the draft at the same setting, the same prompts (the measurement's own
plan), one request at a time:
- hsx: the measuring supervisor's request (streamed, the first token timed); then SGLang's own
  lifetime ``avg_spec_accept_length`` from ``/server_info``, and SpecForge's benchmark's figure
  (``specforge benchmark``: the mean of each request's ``spec_accept_length``) over the same answers;
- bare: a plain non-streamed ``/generate`` per prompt, as SGLang's own clients send it.
Prints hsx's accept length beside SGLang's and SpecForge's, and hsx's tokens/s over the bare
client's (its overhead).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import urllib.request

import aiohttp

from bench.patch import start, stop, wait_ready
from runner.contract.config import load
from runner.measure import control, plan
from runner.measure.supervisor import Measure
from runner.serve import plain


class _Server:
    url = ""


async def _hsx(m: Measure, url: str, setting: str, prompts: list[dict]) -> list[dict]:
    server = _Server()
    server.url = url
    async with aiohttp.ClientSession() as http:
        return [await m._ask(http, server, setting, i, p["input_ids"]) for i, p in enumerate(prompts)]


async def _bare(url: str, prompts: list[dict], sampling: dict) -> list[dict]:
    out = []
    async with aiohttp.ClientSession() as http:
        for p in prompts:
            t0 = time.monotonic()
            async with http.post(
                url + "/generate", json={"input_ids": p["input_ids"], "sampling_params": sampling}
            ) as r:
                got = await r.json()
            out.append({"meta_info": got["meta_info"], "latency_s": time.monotonic() - t0})
    return out


def _served(cfg, draft: str, setting: str, tmp: str, name: str, run):
    """``run(url)`` against a fresh server with the draft at ``setting``; its lifetime figure."""
    argv = plain.argv(cfg, draft, setting)
    url = f"http://{cfg.server.host}:{cfg.server.port}"
    log = os.path.join(tmp, f"{name}.log")
    proc = start(argv, plain.env(cfg), log)
    try:
        wait_ready(proc, url, log)
        got = asyncio.run(run(url))
        with urllib.request.urlopen(url + "/server_info", timeout=30) as r:
            info = json.load(r)
        states = info.get("internal_states") or [{}]
        return got, states[0].get("avg_spec_accept_length")
    finally:
        stop(proc)


def _figures(rows: list[dict]) -> dict:
    tokens = sum(r["meta_info"]["completion_tokens"] for r in rows)
    verify = sum(r["meta_info"].get("spec_verify_ct") or 0 for r in rows)
    per = [
        float(r["meta_info"]["spec_accept_length"]) for r in rows if r["meta_info"].get("spec_accept_length")
    ]
    return {
        "accept_length": tokens / verify if verify else None,  # hsx's: SGLang's per-request ratio, summed
        "specforge": statistics.fmean(per) if per else None,  # specforge benchmark's
        "tokens_per_s": tokens / sum(r["latency_s"] for r in rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", help="an `hsx demo --backend sglang` with its draft exported")
    ap.add_argument("--config", help="else: a job config with [measure] and an exported draft")
    ap.add_argument("--setting", default="3/1/4")
    a = ap.parse_args()
    cfg = load(a.config or os.path.join(a.workdir, "hsx.toml"))
    draft = control.draft(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        prompts = plan.make(cfg)["prompts"]
        m = Measure(tmp, cfg, draft)
        sampling = {"temperature": cfg.measure.temperature, "max_new_tokens": cfg.measure.max_new_tokens}
        rows, sglang = _served(
            cfg, draft, a.setting, tmp, "hsx", lambda url: _hsx(m, url, a.setting, prompts)
        )
        bare, _ = _served(cfg, draft, a.setting, tmp, "bare", lambda url: _bare(url, prompts, sampling))
    mine, theirs = _figures(rows), _figures(bare)
    print(
        f"{len(prompts)} prompts, {cfg.measure.max_new_tokens} new tokens, setting {a.setting}, draft {draft}"
    )
    print(f"accept length: hsx {mine['accept_length']:.4f} · SGLang's lifetime avg_spec_accept_length "
          f"{sglang} · specforge benchmark's (mean per request) {mine['specforge']:.4f} · bare client "
          f"{theirs['accept_length']:.4f}")  # fmt: skip
    if sglang:
        print(f"hsx / SGLang's own: {mine['accept_length'] / sglang:.4f}")
    print(f"hsx / specforge benchmark's: {mine['accept_length'] / mine['specforge']:.4f}")
    print(f"tokens/s: hsx {mine['tokens_per_s']:.3g} · bare {theirs['tokens_per_s']:.3g} · "
          f"ratio {mine['tokens_per_s'] / theirs['tokens_per_s']:.3f}")  # fmt: skip
    ttft = [r["ttft_s"] for r in rows if r.get("ttft_s") is not None]
    if ttft:
        print(f"time to first token (hsx, median): {statistics.median(ttft):.3g}s")


if __name__ == "__main__":
    main()
