"""``hsx-runner``: the GPU-box side. Every verb answers JSON with --json, so the ops side
never parses free text. Exit codes (runner.contract.replies): 0 ok, 1 not ok
(verify/preflight/job failed), 2 usage or config error, 3 refused (already running / not running),
4 a file it reads is broken (a status record, run.yaml: the reply names it and says what to do).

start, resume, stop, status, logs and events belong to the job's engine (runner.engines: this
box, or Slurm); the CLI only picks it and prints its answer."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from . import kinds
from .contract.config import Config, load, require_job, without_secrets
from .contract.errors import BrokenFileError, HsxError, LockedError, StatusError
from .contract.kinds import KINDS as SPECS
from .contract.replies import BROKEN, LOGS, MAX_N, NOT_OK, OK, REFUSED, USAGE, Reply
from .contract.stdout import quiet_when_stdout_closes
from .engines import engine_for


def _answer(args, reply: Reply) -> int:
    print(json.dumps(reply.payload()) if args.json else reply.text)
    return reply.code


def _not_while_training(verb: str):
    """The verbs that change the features refuse (REFUSED, naming the run) while a training
    run uses them, and hold them against a training start while they run (train.exclusive)."""

    def wrap(fn):
        def guarded(args, cfg: Config) -> int:
            from .train import exclusive

            if verb.startswith("verify") and not args.repair:
                return fn(args, cfg)
            try:
                with exclusive.using(cfg.job.out, verb):
                    return fn(args, cfg)
            except exclusive.Refused as e:
                if args.json:
                    reason = str(e)
                    print(json.dumps({"ok": False, "started": False, "refused": True, "reason": reason,
                                      "message": reason}))  # fmt: skip
                else:
                    print(f"hsx-runner {verb}: refused: {e}", file=sys.stderr)
                return REFUSED

        return guarded

    return wrap


def cmd_run(args, cfg: Config) -> int:
    """The job; once it ended done and released the output, its hand-off to training."""
    code = _run_job(args, cfg)
    if code == 0 and cfg.train.python:
        kinds.resolve_trainer(cfg)
        if args.rank is None:
            from .train import handoff

            handoff.run(cfg)
        else:  # a Slurm rank: the last of them to end done hands off
            from .engines import slurm_handoff, slurm_train

            slurm_handoff.run(cfg, args.rank, slurm_train.start)
    return code


@_not_while_training("the extraction")
def _run_job(args, cfg: Config) -> int:
    from .job.phases import run

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


# --- the kinds' verbs (runner.kinds answers, the CLI prints); the extraction's unprefixed --------
def cmd_extract(args, cfg: Config) -> int:
    wait, force = getattr(args, "wait", 30.0), getattr(args, "force", False)
    return _answer(args, kinds.answer("extract", cfg, args.verb, wait, force))


def cmd_kind(args, cfg: Config) -> int:
    """``hsx-runner KIND ACTION``: each kind of runner.contract.kinds but the pipeline (its own)."""
    if args.action == "setup":  # the trainer's venv, before any run
        from .train import control

        kinds.resolve_trainer(cfg)
        return _answer(args, control.setup(cfg, args.root))
    return _answer(args, kinds.answer(args.verb, cfg, args.action, args.wait, vars(args).get("force", False)))


def cmd_logs(args, cfg: Config) -> int:
    return _answer(args, engine_for(cfg).logs(args.n, args.which, args.rank, args.server))


def cmd_events(args, cfg: Config) -> int:
    return _answer(args, engine_for(cfg).events(args.n))


@_not_while_training("verify --repair")
def cmd_verify(args, cfg: Config) -> int:
    from .job import background
    from .output.verify import verify

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
    return _answer(args, Reply(report, text, OK if report["complete"] else NOT_OK))


def _detach(args, cfg: Config, verb: str, argv: list[str]) -> int:
    """``VERB --background``: start it detached and answer at once."""
    from .job import background

    rep = background.start(cfg.job.out, cfg.path, verb, argv)
    text = f"{verb} running in the background (pid {rep['pid']})" if rep["started"] else rep["reason"]
    return _answer(args, Reply(rep, text, OK if rep["started"] else REFUSED))


@_not_while_training("adopt")
def cmd_adopt(args, cfg: Config) -> int:
    """Exit 0 when it ran (bad files included: the report lists them); 3 when refused (a bad
    DIR, a runner holding the job), with the reason; 2 for a config error."""
    from .job import background
    from .output.adopt import AdoptRefused, adopt, refusal_check, summary_text

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
    return _answer(args, Reply({"ok": True, **report, "message": text.splitlines()[0]}, text))


@_not_while_training("compact")
def cmd_compact(args, cfg: Config) -> int:
    """Exit 0 when every sample is in the job's mode afterwards, 1 when some were left as they
    were (the report says why), 3 when refused (nothing changed), 2 for a config error."""
    from .contract.replies import CompactReport
    from .job import background
    from .output.compact import CompactRefused, compact
    from .text.extraction import render_compact

    try:
        if args.background:
            return _detach(args, cfg, "compact", [])
        with background.recording(cfg.job.out, "compact", [], args.record, plain=(CompactRefused,)) as prog:
            report = compact(cfg, progress=prog)
            if prog:
                prog.finish(report)
    except CompactRefused as e:
        if args.json:
            print(json.dumps({"ok": False, "refused": True, "reason": str(e), "message": str(e)}))
        else:
            print(f"hsx-runner compact: refused: {e}", file=sys.stderr)
        return REFUSED
    text = render_compact(CompactReport.from_dict(report))
    payload = {"ok": True, **report, "message": text.splitlines()[0]}
    return _answer(args, Reply(payload, text, OK if report["complete"] else NOT_OK))


def cmd_preflight(args, cfg: Config) -> int:
    from .job.preflight import preflight

    if (args.units is not None or args.until is not None) and not args.free_gpus:
        print("hsx-runner: --units and --until bind --free-gpus", file=sys.stderr)
        return USAGE
    expect = None if args.units is None else [u for u in args.units.split(",") if u]
    report = preflight(cfg, free_gpus=args.free_gpus, expect=expect, until=args.until)
    text = "\n".join(f"{'ok ' if c['ok'] else 'BAD'} {c['name']}: {c['detail']}" for c in report["checks"])
    return _answer(args, Reply(report, text, OK if report["ok"] else NOT_OK))


def cmd_pipeline(args, cfg: Config) -> int:
    from .pipeline import control

    if args.action == "stop":
        return _answer(args, control.stop(cfg, args.wait))
    if args.action == "status":
        return _answer(args, control.status(cfg))
    return _answer(args, control.start(cfg))


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
    for name in ("start", "resume"):
        s = verb(name, cmd_extract, f"{name} the job detached, after preflight")
        s.add_argument("--force", action="store_true", help="start even when preflight's gates fail")
    s = verb("stop", cmd_extract, "stop the running job (SIGTERM, drains in-flight requests)")
    s.add_argument("--wait", type=float, default=30.0)
    verb("status", cmd_extract, "the status record")
    s = verb("logs", cmd_logs, "tail of the runner's log")
    s.add_argument("-n", type=int, default=20)
    s.add_argument("--server", action="store_true", help="the server's log instead")
    s.add_argument("--which", choices=LOGS, default="runner",
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
    s = verb("compact", cmd_compact, "re-encode the output in place to [job] storage (and mantissa_bits)")
    s.add_argument("--background", action="store_true", help="run detached and niced; status shows progress")
    s.add_argument("--record", action="store_true", help=argparse.SUPPRESS)  # the detached run itself
    s = verb("preflight", cmd_preflight, "check GPUs, disk, paths, patch")
    s.add_argument("--free-gpus", action="store_true", help="stop and disable units that hold GPUs")
    s.add_argument(
        "--units", default=None, help="with --free-gpus: only if exactly these units (a,b) hold them"
    )
    s.add_argument(
        "--until", type=float, default=None, help="with --free-gpus: refuse after this time (epoch s)"
    )
    for spec in SPECS.values():  # train, measure, regenerate, pipeline: `hsx-runner KIND ACTION`
        s = verb(spec.name, cmd_kind if spec.stage else cmd_pipeline, spec.help)
        s.add_argument("action", choices=spec.actions)
        s.add_argument(
            "--wait", type=float, default=spec.stop_wait_s, help="stop: how long to wait for it to end"
        )
        if spec.forced:
            s.add_argument("--force", action="store_true", help="start even when preflight's gates fail")
        if "setup" in spec.actions:
            s.add_argument("--root", default=None,
                           help="setup without [train] python: where this box's lane's venv is built")  # fmt: skip
    return p


@quiet_when_stdout_closes
def main(argv: list[str] | None = None) -> int:
    if argv is None:  # this process is hsx-runner: every process it starts inherits this
        for k in set(os.environ) - set(without_secrets(os.environ)):
            del os.environ[k]
    args = parser().parse_args(argv)
    if getattr(args, "n", 1) is not None and not 1 <= getattr(args, "n", 1) <= MAX_N:
        print(f"hsx-runner: -n must be 1..{MAX_N}", file=sys.stderr)
        return USAGE
    try:
        cfg = load(args.config)
        require_job(cfg)
        return args.fn(args, cfg)
    except StatusError as e:  # a record or run.yaml that is there but broken: the box answered
        path = e.path if isinstance(e, BrokenFileError) else None
        if args.json:
            reason = e.reason if isinstance(e, BrokenFileError) else str(e)
            print(json.dumps({"ok": False, "broken": path, "reason": reason, "message": str(e)}))
        print(f"hsx-runner: {e}", file=sys.stderr)
        return BROKEN
    except HsxError as e:
        print(f"hsx-runner: {e}", file=sys.stderr)
        return USAGE


def script() -> None:
    """hsx-runner's entry. A long run has torch loaded, and the interpreter's teardown of it is
    seconds of garbage collection after the record is written and every file closed: the process
    ends at once instead (what it started is in its own group, stopped already)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    script()
