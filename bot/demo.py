"""``hsx demo``: a tiny job built here (runner.data.demo_assets: a model, a tokenizer and
conversations from a seed, in one workdir), started on this machine, and watched: headless (the
status text each time it changes, to the end) or from the chat console with the watcher's alerts.
By default the whole pipeline the demo can run here (regenerate → extract → train, and measure on
``--backend sglang``); a rerun resumes. The runner's machinery is imported lazily, as only the
demo on the ops side reaches it."""

from __future__ import annotations

import os
import time

from runner.contract import timing
from runner.contract.config import Config, load


def run(args) -> int:
    """`hsx demo`: a tiny job built here, started, and watched headless or from the console."""
    from runner.data import demo_assets

    workdir = os.path.abspath(args.workdir)
    if args.backend == "sglang" and args.target not in SGLANG_TARGETS:
        raise SystemExit(
            f"hsx demo --backend sglang runs --target {' or '.join(SGLANG_TARGETS)}; "
            f"{args.target} runs on the reference backend"
        )
    if args.tp != 1 and args.backend != "sglang":
        raise SystemExit("hsx demo --tp N runs SGLang's tensor parallelism: add --backend sglang")
    server = _sglang_cpu_server(SGLANG_TARGETS[args.target], args.tp) if args.backend == "sglang" else None
    what = "a tiny model" if args.target == "demo" else f"a tiny {args.target}-shaped model"
    print(f"hsx demo: building {what}, tokenizer and {args.samples} conversations in {workdir} ...")
    say = lambda m: print(f"hsx demo: {m}")  # noqa: E731
    conf = demo_assets.build(workdir, args.samples, args.seed, server, args.target, say=say,
                             stages=_stages(args))  # fmt: skip
    came_from = demo_assets.relocate(workdir)
    if came_from:
        print(f"hsx demo: {workdir} was copied or moved from {came_from}: its files now name {workdir}")
    if load(conf).job.trust_remote_code:
        print("hsx demo: trust_remote_code = true: the tokenizer is hsx's own code in model/")
    cfg = load(conf)
    _pace(args, cfg)
    from bot.wiring import open_box

    box = open_box(cfg)
    piped = bool(cfg.pipeline.stages)
    started = box.call("pipeline", "start") if piped else box.start()
    if started.get("started") and piped:
        print(f"hsx demo: pipeline started ({' → '.join(cfg.pipeline.stages)}; pid {started['pid']}): "
              f"the target writes the answers again into {cfg.job.dataset}, then each stage hands on")  # fmt: skip
    elif started.get("started"):
        print(f"hsx demo: extraction started (runner pid {started['pid']}), output in {cfg.job.out}")
    else:
        print(f"hsx demo: {started.get('reason')}")
    try:
        if args.headless:
            return _headless_pipeline(box) if piped else _headless(box, started.get("pid"))
        from bot.terminal.console import run_console

        run_console(box, cfg, watch=True)
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        if piped and box.record("pipeline").get("phase") in ("preflight", "running"):
            print("hsx demo: stopping the pipeline and its stage; run the same command again to resume")
            box.call("pipeline", "stop")
        rec = box.status()
        if rec.phase.is_active():
            print("hsx demo: stopping the job; run the same command again to resume")
            box.stop()
        r = cfg.remote.runner  # absolute: a venv's bin is often not on PATH
        print(f"inspect: {r} status --config {conf} --json; {r} verify --config {conf} --json")
        box.close()


def _stages(args) -> list[str]:
    """--stages as a list, checked: by default the whole pipeline the demo can run here."""
    from runner.contract.pipeline import check_stages

    if args.stages is None:
        return ["regenerate", "extract", "train", *(["measure"] if args.backend == "sglang" else [])]
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if why := check_stages(stages):
        raise SystemExit(f"hsx demo --stages: {why}")
    if "measure" in stages and args.backend != "sglang":
        raise SystemExit("hsx demo --stages ...,measure measures the draft in SGLang: add --backend sglang")
    return stages


def _headless_pipeline(box) -> int:
    """The pipeline's text each time it changes, to its end: 0 when it ended done."""
    from runner.text.pipeline import render_pipeline

    last = ""
    while True:
        d = box.record("pipeline")
        text = render_pipeline(d)
        if text != last:
            print(text + "\n", flush=True)
            last = text
        if d.get("phase") not in ("preflight", "running"):
            return 0 if d.get("phase") == "done" else 1
        time.sleep(timing.current().headless_poll_s)


DEMO_PACE_S = 1.0  # with the console: 500 samples in about 2 minutes at the demo's 4 in flight
TRAIN_PACE = 1.0  # the demo's training: seconds per optimizer step for each second of --pace


def _pace(args, cfg: Config) -> None:
    """With the console the demo is paced to be watched; --headless runs at full speed. The
    reference server this process starts (or a console resume restarts) reads it."""
    from runner.contract.train import PACE_ENV as TRAIN_PACE_ENV
    from runner.data.demo_assets import PACE_ENV

    pace = args.pace if args.pace is not None else (0.0 if args.headless else DEMO_PACE_S)
    os.environ[PACE_ENV] = str(pace)
    os.environ[TRAIN_PACE_ENV] = str(TRAIN_PACE * pace)  # its 120 steps in about 2 minutes, as the extraction
    if pace and cfg.server.backend == "reference":
        rate = cfg.job.concurrency / pace
        print(
            f"hsx demo: paced to ~{rate:g} samples/s (--pace {pace:g}: seconds per request); --pace 0 is full speed"
        )


# What each target runs as on SGLang's CPU engine (runner/sglang_cpu.py ATTENTION).
SGLANG_TARGETS = {"demo": "llama", "kimi-k2.5": "kimi_k25"}


def _sglang_cpu_server(arch: str, tp: int) -> dict:
    """The real patched SGLang on this CPU: its own venv (built on first use, several minutes)
    and the test-only CPU kernel stand-in, both from this source checkout."""
    from runner import sglang_cpu

    root = sglang_cpu.checkout_root()
    if root is None:
        raise SystemExit("hsx demo --backend sglang runs from a source checkout (it uses tests/sglang_cpu)")
    py = sglang_cpu.python_of(os.path.join(root, ".cache"))
    if py is None:
        print("hsx demo: building the SGLang CPU venv once (~6 GB, several minutes) ...", flush=True)
        py = sglang_cpu.build(os.path.join(root, ".cache"), say=lambda m: print(f"hsx demo: {m}", flush=True))
    return sglang_cpu.server_section(arch, py, os.path.join(root, "tests", "sglang_cpu"), tp=tp)


def _headless(box, pid: int | None) -> int:
    from runner.contract.status import HANDOFF_PENDING
    from runner.text.extraction import render_text

    last = ""
    deadline = time.monotonic() + 60
    while True:
        rec = box.status()
        if pid and rec.pid != pid and time.monotonic() < deadline:
            time.sleep(0.2)  # the record is still the previous run's
            continue
        text = render_text(rec)
        if text != last:
            print(text, flush=True)
            print("", flush=True)
            last = text
        if rec.phase.is_terminal() and rec.handoff != HANDOFF_PENDING:  # done: and handed to training
            return 0 if rec.phase.value == "done" else 1
        time.sleep(timing.current().headless_poll_s)
