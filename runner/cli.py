"""``hsx-runner``: the GPU-box side. Every verb answers JSON with --json, so the ops side
never parses free text. Exit codes: 0 ok, 1 not ok (verify/preflight/job failed),
2 usage or config error, 3 refused (already running / not running)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from . import lock, view
from .contract.config import Config, load, require_job
from .contract.errors import HsxError, LockedError, StatusError
from .contract.replies import NOT_OK, OK, REFUSED, USAGE


def _emit(args, obj: dict, text: str) -> None:
    if "started" in obj or "stopped" in obj:  # one shape for every action's reply
        obj = {"ok": bool(obj.get("started", obj.get("stopped"))), **obj, "message": text}
    print(json.dumps(obj) if args.json else text)


def _slurm(cfg: Config) -> bool:
    return cfg.cluster.engine == "slurm"


def cmd_run(args, cfg: Config) -> int:
    from .job import run

    if (args.rank is None) != (args.world is None):
        print("hsx-runner: --rank and --world go together", file=sys.stderr)
        return USAGE
    try:
        if args.rank is not None:
            return run(cfg, args.rank, args.world)
        return run(cfg)
    except LockedError as e:
        print(f"hsx-runner: {e}", file=sys.stderr)
        return REFUSED


def _submit(args, cfg: Config, resume: bool) -> int:
    from . import slurm

    ok, obj, text = slurm.submit(cfg, resume)
    _emit(args, {"started": ok, "verb": "resume" if resume else "start", **obj}, text)
    return 0 if ok else REFUSED


def _spawn(args, cfg: Config, resume: bool) -> int:
    import subprocess

    if _slurm(cfg):
        return _submit(args, cfg, resume)
    out = cfg.job.out
    held, pid = lock.is_held(out)
    verb = "resume" if resume else "start"
    if held:
        if resume and pid and view.current(out).phase.value == "paused":
            os.kill(pid, signal.SIGUSR1)  # a paused runner re-checks its disk now
            msg = f"runner pid {pid} is paused; asked it to re-check the disk and continue"
            _emit(args, {"ok": True, "started": False, "woken": True, "pid": pid}, msg)
            return 0
        _emit(
            args,
            {"started": False, "pid": pid, "reason": f"already running (pid {pid})"},
            f"already running (pid {pid})",
        )
        return REFUSED
    if resume and not os.path.exists(os.path.join(out, "dataset.json")):
        msg = f"nothing to resume in {out}; use start"
        _emit(args, {"started": False, "reason": msg}, msg)
        return REFUSED
    from .preflight import GATES, gate, preflight

    report = preflight(cfg)
    blocked = gate(report, args.force)
    if blocked:
        msg = "preflight refused the start: " + "; ".join(
            f"{c['name']}: {c['detail']}" + (f" (fix: {c['fix']})" if c["fix"] else "") for c in blocked
        )
        _emit(args, {"started": False, "reason": msg, "preflight": report}, msg + "\n(--force skips it)")
        return REFUSED
    skipped = [c["name"] for c in report["checks"] if c["name"] in GATES and not c["ok"]]
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    with open(os.path.join(out, "logs", "runner.out"), "ab") as log:
        p = subprocess.Popen(  # its stdout/stderr: logs/runner.out (Names.crash_log)
            [sys.executable, "-m", "runner.cli", "run", "--config", cfg.path],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    # Answer once the child has claimed its record and got through set-up (or failed in it),
    # so a start that dies at once says why instead of "started".
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        held, hpid = lock.is_held(out)
        if held and hpid == p.pid:
            return _settled(args, out, p, verb, skipped)
        code = p.poll()
        if code is not None:
            held, hpid = lock.is_held(out)
            reason = f"already running (pid {hpid})" if held else f"runner exited with code {code}; see logs"
            _emit(args, {"started": False, "pid": hpid, "reason": reason}, reason)
            return REFUSED
        time.sleep(0.05)
    _emit(
        args,
        {"started": False, "pid": p.pid, "reason": "runner did not take the lock within 20s"},
        "runner slow to start",
    )
    return REFUSED


SETTLE_S = 30.0  # how long start waits for set-up (config, model, dataset, tokenizer) to pass


def _settled(args, out: str, p, verb: str, forced: list[str]) -> int:
    """The runner holds the job: wait until its set-up passed, or report its failure."""
    word = "resumed" if verb == "resume" else "started"
    extra = {"forced": forced} if forced else {}
    note = f" (preflight skipped with --force: {', '.join(forced)})" if forced else ""
    deadline = time.monotonic() + SETTLE_S
    while True:
        try:
            rec = view.current(out)
        except StatusError:  # a corrupt record the child has not rewritten yet
            if time.monotonic() > deadline:
                _emit(
                    args,
                    {"started": True, "pid": p.pid, "verb": verb, **extra},
                    f"{word}: runner pid {p.pid}{note}",
                )
                return 0
            time.sleep(0.05)
            continue
        if rec.pid == p.pid and rec.phase.value == "failed":
            why = f"{rec.failed_in or rec.phase.value}: {rec.reason}" + (f" — {rec.hint}" if rec.hint else "")
            msg = f"the runner failed at once in {why}"
            _emit(args, {"started": False, "pid": p.pid, "reason": msg, "failed_in": rec.failed_in}, msg)
            return REFUSED
        past_setup = rec.pid == p.pid and rec.phase.value not in ("preflight",)
        if past_setup or time.monotonic() > deadline:
            _emit(
                args,
                {"started": True, "pid": p.pid, "verb": verb, **extra},
                f"{word}: runner pid {p.pid}{note}",
            )
            return 0
        if p.poll() is not None and not lock.is_held(out)[0]:
            msg = f"the runner exited with code {p.returncode} at once: {rec.reason or 'see /extract logs --crash'}"
            _emit(args, {"started": False, "pid": p.pid, "reason": msg}, msg)
            return REFUSED
        time.sleep(0.05)


def cmd_stop(args, cfg: Config) -> int:
    if _slurm(cfg):
        from . import slurm

        ok, obj, text = slurm.cancel(cfg, args.wait)
        _emit(args, {"stopped": ok, **obj}, text)
        return 0 if ok or obj.get("signalled") else REFUSED
    held, pid = lock.is_held(cfg.job.out)
    if not held or not pid:
        _emit(args, {"stopped": False, "reason": "not running"}, "not running")
        return REFUSED
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline and lock.is_held(cfg.job.out)[0]:
        time.sleep(0.1)
    gone = not lock.is_held(cfg.job.out)[0]
    msg = f"runner pid {pid} stopped" if gone else f"SIGTERM sent to pid {pid}; still draining"
    _emit(args, {"stopped": gone, "pid": pid, "signalled": True, "reason": None if gone else "draining"}, msg)
    return 0


def cmd_status(args, cfg: Config) -> int:
    if _slurm(cfg):
        from . import slurm

        rec = slurm.merged(cfg)
    else:
        rec = view.current(cfg.job.out)
    if args.json:
        print(json.dumps(rec.to_dict()))
    else:
        from runner.contract.render import render_text

        print(render_text(rec))
    return 0


def cmd_logs(args, cfg: Config) -> int:
    from .ranks import Names

    if args.rank is None and _slurm(cfg):  # every rank's tail, each line marked with its rank
        from . import slurm

        st = slurm.load_state(cfg.job.out) or {"ranges": []}
        world = len(st["ranges"])
        each = max(1, args.n // max(1, world))
        lines = []
        for r in range(world):
            names = Names(cfg.job.out, r)
            lines += [
                f"[rank {r}] {x}"
                for x in view.tail(names.server_log if args.server else names.runner_log, each)
            ]
        _emit(args, {"path": os.path.join(cfg.job.out, "logs"), "lines": lines}, "\n".join(lines))
        return 0
    names = Names(cfg.job.out, args.rank)
    logs = {"runner": names.runner_log, "server": names.server_log, "crash": names.crash_log}
    which = "server" if args.server else args.which
    if which != "all":
        lines = view.tail(logs[which], args.n)
        _emit(args, {"path": logs[which], "lines": lines}, "\n".join(lines))
        return 0
    lines = []  # a short tail of each, under its name; empty ones left out
    for name, path in logs.items():
        part = view.tail(path, args.n)
        if part:
            lines += [f"--- {name}: {os.path.basename(path)} ---", *part]
    _emit(args, {"path": os.path.dirname(names.runner_log), "lines": lines}, "\n".join(lines))
    return 0


def cmd_events(args, cfg: Config) -> int:
    import orjson

    lines = view.tail(os.path.join(cfg.job.out, "events.jsonl"), args.n)
    if _slurm(cfg):  # the ranks' events, in time order
        from .ranks import Names
        from .slurm import load_state

        world = len((load_state(cfg.job.out) or {"ranges": []})["ranges"])
        lines = [x for r in range(world) for x in view.tail(Names(cfg.job.out, r).events, args.n)]
        lines = sorted(lines, key=lambda x: x[:30])[-args.n :]
    events = []
    for line in lines:
        try:
            events.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    _emit(args, {"events": events}, "\n".join(lines))
    return 0


def cmd_verify(args, cfg: Config) -> int:
    from . import background
    from .verify import verify

    flags = ["--repair"] * args.repair + ["--quick"] * args.quick
    if args.background:
        return _detach(args, cfg, "verify", flags)
    with background.recording(cfg.job.out, "verify", flags, args.record) as prog:
        report = verify(cfg, repair=args.repair, quick=args.quick, progress=prog)
        if prog:
            prog.finish(report)
    text = (f"{report['ok']}/{report['total']} sound; missing {len(report['missing'])}, "
            f"corrupt {len(report['corrupt'])}, failed {len(report['failed'])}"
            + (f", unrecorded {len(report['unrecorded'])}" if report["unrecorded"] else ""))  # fmt: skip
    _emit(args, report, text)
    return OK if report["complete"] else NOT_OK


def _detach(args, cfg: Config, verb: str, argv: list[str]) -> int:
    """``VERB --background``: start it detached and answer at once."""
    from . import background

    rep = background.start(cfg.job.out, cfg.path, verb, argv)
    text = f"{verb} running in the background (pid {rep['pid']})" if rep["started"] else rep["reason"]
    _emit(args, rep, text)
    return OK if rep["started"] else REFUSED


def cmd_adopt(args, cfg: Config) -> int:
    """Exit 0 when it ran (bad files included: the report lists them); 3 when refused (a bad
    DIR, a runner holding the job), with the reason; 2 for a config error."""
    from . import background
    from .adopt import AdoptRefused, adopt, refusal_check, summary_text

    try:
        if args.background:  # refuse here, at once, what the detached run would refuse
            refusal_check(cfg, args.dir)
            return _detach(args, cfg, "adopt", [os.path.abspath(args.dir)])
        refusals = (AdoptRefused, LockedError)
        with background.recording(cfg.job.out, "adopt", [args.dir], args.record, plain=refusals) as prog:
            report = adopt(cfg, args.dir, progress=prog)
            if prog:
                prog.finish(report)
    except (AdoptRefused, LockedError) as e:
        why = str(e) + ("; stop it first (hsx-runner stop), then adopt" if isinstance(e, LockedError) else "")
        if args.json:
            print(json.dumps({"ok": False, "refused": True, "reason": why, "message": why}))
        else:
            print(f"hsx-runner adopt: refused: {why}", file=sys.stderr)
        return REFUSED
    text = summary_text(report)
    _emit(args, {"ok": True, **report, "message": text.splitlines()[0]}, text)
    return 0


def cmd_preflight(args, cfg: Config) -> int:
    from .preflight import preflight

    report = preflight(cfg, free_gpus=args.free_gpus)
    text = "\n".join(f"{'ok ' if c['ok'] else 'BAD'} {c['name']}: {c['detail']}" for c in report["checks"])
    _emit(args, report, text)
    return OK if report["ok"] else NOT_OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hsx-runner", description="hsx on the GPU box")
    sub = p.add_subparsers(dest="verb", required=True)

    def verb(name, fn, help_):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--config", default=None, help="hsx.toml (default: $HSX_CONFIG or ./hsx.toml)")
        s.add_argument("--json", action="store_true", help="answer JSON")
        s.set_defaults(fn=fn)
        return s

    s = verb("run", cmd_run, "run the job in the foreground (resumes what is there)")
    s.add_argument("--rank", type=int, default=None, help="run only this rank's samples (a Slurm array task)")
    s.add_argument("--world", type=int, default=None, help="the number of ranks the job is split into")
    for name, resume in (("start", False), ("resume", True)):
        s = verb(name, lambda a, c, r=resume: _spawn(a, c, r), f"{name} the job detached, after preflight")
        s.add_argument("--force", action="store_true", help="start even when preflight's gates fail")
    s = verb("stop", cmd_stop, "stop the running job (SIGTERM, drains in-flight requests)")
    s.add_argument("--wait", type=float, default=30.0)
    verb("status", cmd_status, "the status record")
    s = verb("logs", cmd_logs, "tail of the runner's log")
    s.add_argument("-n", type=int, default=20)
    s.add_argument("--server", action="store_true", help="the server's log instead")
    s.add_argument("--which", choices=("runner", "server", "crash", "all"), default="runner",
                   help="crash: what the runner printed as it died (logs/runner.out); all: a tail of each")  # fmt: skip
    s.add_argument("--rank", type=int, default=None, help="this rank's log (a cluster run)")
    s = verb("events", cmd_events, "recent events (phases, milestones, errors, progress points)")
    s.add_argument("-n", type=int, default=2000)
    s = verb("verify", cmd_verify, "check every sample")
    s.add_argument("--repair", action="store_true", help="re-queue corrupt and missing samples")
    s.add_argument("--quick", action="store_true", help="skip checksums and tensor values")
    s.add_argument("--background", action="store_true", help="run detached and niced; status shows progress")
    s.add_argument("--record", action="store_true", help=argparse.SUPPRESS)  # the detached run itself
    s = verb("adopt", cmd_adopt, "take over samples another tool wrote (SpecForge layout or .pt files)")
    s.add_argument("--background", action="store_true", help="run detached and niced; status shows progress")
    s.add_argument("--record", action="store_true", help=argparse.SUPPRESS)  # the detached run itself
    s.add_argument("dir", help="the directory with the files (the job's own out, or another)")
    s = verb("preflight", cmd_preflight, "check GPUs, disk, paths, patch")
    s.add_argument("--free-gpus", action="store_true", help="stop and disable units that hold GPUs")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "n", 1) is not None and not 1 <= getattr(args, "n", 1) <= 5000:
        print("hsx-runner: -n must be 1..5000", file=sys.stderr)
        return USAGE
    try:
        cfg = load(args.config)
        require_job(cfg)
        return args.fn(args, cfg)
    except StatusError as e:
        print(f"hsx-runner: {e}", file=sys.stderr)
        return USAGE
    except HsxError as e:
        print(f"hsx-runner: {e}", file=sys.stderr)
        return USAGE


if __name__ == "__main__":
    sys.exit(main())
