"""Training steps/s under ``hsx-runner train`` ÷ bare ``specforge train``, the same run.yaml.

    .venv/bin/python -m bench.train [--workdir D] [--samples 40] [--steps 60] [--repeats 2] [--gpus 1]

On an ``hsx demo`` output (built in ``--workdir`` unless there; ``/tmp/hsx-bench-train`` by
default), with the demo's [train] (the SpecForge CPU lane) cut to ``--steps``. Runs, in ABBA
order ``--repeats`` times:

* hsx: ``hsx-runner train start`` (its supervisor reading the log, fsyncing each checkpoint,
  rewriting status.json), waited for by its supervisor's pid, never polled (its wall time
  includes the start's interpreter check);
* bare: command.json's argv and env run directly (SpecForge needs the lane's env to run on a
  CPU at all), stdout to a file, nothing watching.

Both use the one run dir and its run.yaml (its output emptied before each run, so no run
resumes or rewinds another). The rate is SpecForge's own, from its step lines: steps over the
seconds of its ``perf/optimizer_step_time_s`` windows (checkpoint saves included), the first
window (warm-up) left out. The ratio is the median over the repeats of each back-to-back
pair's (the box's other load drifts less within a pair). Also the supervisor's own CPU time over its run's wall time: what hsx can take from the trainer
at most, whatever the box's other load. Prints a table, then one JSON line; medians over the
repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from runner.train import progress

BIN = os.path.dirname(sys.executable)


def demo(workdir: str, samples: int) -> None:
    if not os.path.exists(os.path.join(workdir, "out", "dataset.json")):
        argv = [
            os.path.join(BIN, "hsx"),
            "demo",
            "--workdir",
            workdir,
            "--samples",
            str(samples),
            "--headless",
        ]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def config(workdir: str, steps: int, gpus: int) -> str:
    with open(os.path.join(workdir, "hsx.toml")) as f:
        text = f.read()
    text = re.sub(
        r"(?m)^max_steps = \d+$", f'max_steps = {steps}\nrun_dir = "bench-train"\ngpus = {gpus}', text
    )
    path = os.path.join(workdir, "bench.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def rate(log_text: str) -> tuple[float, int]:
    """(steps/s by SpecForge's own step times, steps logged) of one run's log."""
    steps = progress.StepLines()
    windows = [m["perf/optimizer_step_time_s"] for line in log_text.splitlines() for _, m in steps.feed(line)
               if "perf/optimizer_step_time_s" in m]  # fmt: skip
    times = windows[1:]
    return len(times) / sum(times), len(windows)


def _wait_cpu(pid: int) -> float:
    """Wait for ``pid`` to end; the CPU seconds it had used when last seen (its own, not its
    children's: the supervisor's cost beside the trainer it watches)."""
    cpu = 0.0
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return cpu
        if rest[0] == "Z":
            return cpu
        cpu = (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
        time.sleep(0.2)


def hsx_run(conf: str, root: str) -> dict:
    shutil.rmtree(os.path.join(root, "output"), ignore_errors=True)
    t0 = time.monotonic()
    p = subprocess.run([os.path.join(BIN, "hsx-runner"), "train", "start", "--json", "--config", conf],
                       capture_output=True, text=True, check=True)  # fmt: skip
    cpu = _wait_cpu(json.loads(p.stdout)["supervisor_pid"])
    wall = time.monotonic() - t0
    st = json.loads(subprocess.run([os.path.join(BIN, "hsx-runner"), "train", "status", "--json", "--config", conf],
                                   capture_output=True, text=True, check=True).stdout)  # fmt: skip
    assert st["phase"] == "done", st
    with open(os.path.join(root, "train.log")) as f:
        log = f.read().rsplit("--- hsx: start at ", 1)[1]
    got = dict(zip(("steps_per_s", "logged"), rate(log), strict=True))
    return {"wall_s": wall, "supervisor_cpu_s": cpu, **got}


def bare_run(root: str) -> dict:
    shutil.rmtree(os.path.join(root, "output"), ignore_errors=True)
    with open(os.path.join(root, "command.json")) as f:
        cmd = json.load(f)
    log = os.path.join(root, "bare.log")
    t0 = time.monotonic()
    with open(log, "wb") as out:
        subprocess.run(cmd["argv"], env={**os.environ, **cmd["env"]}, cwd=root, stdout=out,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=True)  # fmt: skip
    wall = time.monotonic() - t0
    with open(log) as f:
        return {"wall_s": wall, **dict(zip(("steps_per_s", "logged"), rate(f.read()), strict=True))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="/tmp/hsx-bench-train")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=1, help="trainer processes ([train] gpus)")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    workdir = os.path.abspath(args.workdir)
    demo(workdir, args.samples)
    conf = config(workdir, args.steps, args.gpus)
    root = os.path.join(workdir, "bench-train")
    runs: dict[str, list[dict]] = {"hsx": [], "bare": []}
    hsx_run(conf, root)  # writes the run dir (run.yaml, command.json, the target view) and warms caches
    for i in range(args.repeats):
        for kind in ("hsx", "bare") if i % 2 == 0 else ("bare", "hsx"):
            got = hsx_run(conf, root) if kind == "hsx" else bare_run(root)
            runs[kind].append(got)
            print(f"{kind:5} run {i + 1}: {got['steps_per_s']:.3f} steps/s ({got['logged']} step lines), "
                  f"{got['wall_s']:.1f} s wall")  # fmt: skip
    med = {k: statistics.median(r["steps_per_s"] for r in v) for k, v in runs.items()}
    wall = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}
    print(f"{'':5} {'steps/s':>9} {'wall s':>8}")
    for k in ("bare", "hsx"):
        print(f"{k:5} {med[k]:9.3f} {wall[k]:8.1f}")
    pairs = [h["steps_per_s"] / b["steps_per_s"] for h, b in zip(runs["hsx"], runs["bare"], strict=True)]
    print(f"ratio hsx / bare: {statistics.median(pairs):.3f}, the median of each repeat's back-to-back pair "
          f"({', '.join(f'{r:.3f}' for r in pairs)}); of the medians {med['hsx'] / med['bare']:.3f} (goal >= 0.98)")  # fmt: skip
    sup = statistics.median(r["supervisor_cpu_s"] / r["wall_s"] for r in runs["hsx"])
    print(f"hsx's supervisor: {100 * sup:.2f}% of one core over its run (median)")
    print(f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    report = {"steps": args.steps, "gpus": args.gpus, "repeats": args.repeats,
              "load": [load0, os.getloadavg()[0]], "bare_steps_per_s": med["bare"], "hsx_steps_per_s": med["hsx"],
              "ratio": statistics.median(pairs), "pair_ratios": pairs, "supervisor_core_share": sup, "wall_s": wall,
              "runs": runs}  # fmt: skip
    print(json.dumps(report))


if __name__ == "__main__":
    main()
