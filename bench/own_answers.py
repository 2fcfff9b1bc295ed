"""The demo's draft trained on the target's own answers against the same draft trained on the
dataset's original answers, both measured in the real SGLang (the CPU lane), in one run.

``python -m bench.own_answers --samples 100 [--prompts 16] [--max-new-tokens 48]``

Two `hsx demo --backend sglang` workdirs of the same seed: ``own`` runs the pipeline from the
regeneration (regenerate → extract → train → measure), ``original`` from the extraction
(extract → train → measure). Each draft is then measured again by `hsx-runner measure` with more
prompts than the demo's (its held-out rows: the same user turns in both) at one setting, the
target alone first. Prints per arm: the training's top-1 acc (mean over the first and the last
logged steps, SpecForge's own figures), the simulated accept length at the export, and the
measured accept length and tokens/s ratio, SGLang's units.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bot.render.train_chart import ends
from runner.contract.train import ACC_WINDOW

BIN = os.path.dirname(sys.executable)
ARMS = {"own": "regenerate,extract,train,measure", "original": "extract,train,measure"}


def _hsx(*argv: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, argv[0]), *argv[1:]], capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def _status(kind: str, conf: str) -> dict:
    p = _hsx("hsx-runner", kind, "status", "--json", "--config", conf, timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"{kind} status: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def _wait(kind: str, conf: str) -> dict:
    while (st := _status(kind, conf))["phase"] not in ("done", "failed", "crashed", "stopped"):
        time.sleep(5)
    if st["phase"] != "done":
        raise SystemExit(f"{kind} ended {st['phase']}: {st.get('reason')}")
    return st


def _bench_config(conf: str, run_dir: str, prompts: int, tokens: int, setting: str) -> str:
    """The demo's config with its [measure] section's keys set for this bench (its other sections,
    [pipeline] among them, as they are)."""
    text = open(conf).read()
    start = text.find("\n[measure]")
    if start < 0:
        raise SystemExit(f"{conf} has no [measure] section: was the demo run with --backend sglang?")
    end = text.find("\n[", start + 1)
    end = len(text) if end < 0 else end
    measure = (f'\n[measure]\nrun_dir = "{run_dir}"\nsamples = {prompts}\nmax_new_tokens = {tokens}\n'
               f'settings = ["{setting}"]\n')  # fmt: skip
    out = os.path.join(os.path.dirname(conf), "hsx-bench.toml")
    with open(out, "w") as f:
        f.write(text[:start] + measure + text[end:])
    return out


def _f(v: float | None, fmt: str = ".3f") -> str:
    return "?" if v is None else format(v, fmt)


def _acc(root: str) -> tuple[float | None, float | None]:
    """The logged steps' top-1 acc: the means of the first and the last ACC_WINDOW, as the chart's caption."""
    with open(os.path.join(root, "history.jsonl")) as f:
        steps = [json.loads(x) for x in f if x.strip()]
    return ends([r.get("acc") for r in steps if r.get("kind") == "step"], ACC_WINDOW)


def arm(work: str, name: str, a) -> dict:
    w = os.path.join(work, name)
    p = _hsx("hsx", "demo", "--backend", "sglang", "--headless", "--workdir", w, "--samples", str(a.samples),
             "--seed", str(a.seed), "--stages", ARMS[name])  # fmt: skip
    if p.returncode != 0:
        raise SystemExit(f"hsx demo ({name}): {p.stdout[-2000:]}{p.stderr[-2000:]}")
    conf = os.path.join(w, "hsx.toml")
    trained = _wait("train", conf)
    demo = _wait("measure", conf)
    bench = _bench_config(conf, os.path.join(w, "out-measure-bench"), a.prompts, a.max_new_tokens, a.setting)
    p = _hsx("hsx-runner", "measure", "start", "--json", "--config", bench)
    if p.returncode != 0:
        raise SystemExit(f"measure start ({name}): {p.stdout}{p.stderr}")
    st = _wait("measure", bench)
    with open(os.path.join(st["run_dir"], "prompts.json")) as f:
        prompts = [x["input_ids"] for x in json.load(f)["prompts"]]
    first, last = _acc(trained["run_dir"])
    spec = next(s for s in st["settings"] if s["setting"] == a.setting)
    return {"arm": name, "acc_first": first, "acc_last": last, "simulated": st.get("simulated"),
            "demo_accept_length": demo.get("accept_length"), "accept_length": spec["accept_length"],
            "speedup": spec["speedup"], "same": spec["same"], "differ": len(spec["differ"]),
            "prompts": prompts}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.own_answers", description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=100, help="the demo's conversations")
    p.add_argument("--prompts", type=int, default=16, help="held-out prompts the bench measures")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--setting", default="3/1/4")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", default=tempfile.gettempdir())
    p.add_argument("--keep", action="store_true", help="keep the two workdirs")
    a = p.parse_args(argv)
    if a.prompts > min(20, a.samples // 4):
        p.error(f"--prompts: the demo holds out {min(20, a.samples // 4)} rows of {a.samples}")
    work = tempfile.mkdtemp(prefix="hsx-bench-own-", dir=a.dir)
    load0 = os.getloadavg()
    try:
        rows = [arm(work, name, a) for name in ARMS]
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    if rows[0].pop("prompts") != rows[1].pop("prompts"):
        raise SystemExit("the two arms measured different prompts: the comparison would not hold")
    print(
        f"{a.samples} samples, {a.prompts} held-out prompts x {a.max_new_tokens} tokens, greedy, at {a.setting}"
    )
    for r in rows:
        print(f"{r['arm']:>8}: acc {_f(r['acc_first'])} -> {_f(r['acc_last'])} (mean of the first and last "
              f"{ACC_WINDOW} steps), simulated ~{_f(r['simulated'], '.2f')}, measured accept length "
              f"{_f(r['accept_length'])} (the demo's 4 prompts: {_f(r['demo_accept_length'])}), tokens/s "
              f"x{_f(r['speedup'], '.2f')}, {r['same']} outputs as the target alone's, {r['differ']} not")  # fmt: skip
    ratio = rows[0]["accept_length"] / rows[1]["accept_length"]
    print(f"measured accept length, own answers / original: {ratio:.3f}")
    print(f"load average {' '.join(f'{x:.2f}' for x in load0)} at the start, "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")  # fmt: skip
    print(json.dumps({"rows": rows, "ratio": ratio, "args": vars(a)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
