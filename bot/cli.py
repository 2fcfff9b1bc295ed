"""``hsx``: the ops side. Verbs go through remote/ (local or SSH) to ``hsx-runner``;
``hsx demo`` builds a tiny job here and runs the whole loop with a chat console."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys

from bot import demo
from bot.verbs.commands import Command, command_of
from bot.verbs.table import EXTRACTION, KINDS, Kind
from remote.client import check_adopt_dir
from runner.contract.config import Config, load
from runner.contract.errors import HsxError
from runner.contract.replies import Answer
from runner.contract.stdout import quiet_when_stdout_closes


def _box(cfg: Config):
    from bot.wiring import open_box

    return open_box(cfg)


def cmd_verb(args) -> int:
    cfg = load(args.config)
    verb = EXTRACTION.table[args.verb]
    fields = {f.field: getattr(args, f.field) for f in verb.flags}
    if "path" in fields:  # adopt's DIR as given, not the chat parser's narrower rule
        if cfg.remote.transport == "local":  # the GPU box is this machine: a relative DIR is clear
            fields["path"] = os.path.abspath(fields["path"])
        try:
            check_adopt_dir(fields["path"])
        except ValueError as e:
            print(f"hsx: {e}", file=sys.stderr)
            return 2
    # A terminal is an operator and is not asked to confirm; it waits for verify's and adopt's
    # reports (chat runs them detached).
    cmd = command_of(EXTRACTION, verb.name, confirmed=bool(verb.confirm), wait=True, **fields)
    if cmd.problem and getattr(args, "json", False):  # JSON has no help text to answer with
        print(f"hsx: {cmd.problem}", file=sys.stderr)
        return 2

    def run(box) -> int:
        if getattr(args, "json", False):
            reply = _json_reply(box, cmd)
            print(json.dumps(reply))
            return 0 if not verb.report or reply.get("complete", reply.get("ok", True)) else 1
        if verb.name == "preflight":  # a terminal gets the whole report
            print(json.dumps(box.preflight(), indent=1))
            return 0
        from bot.wiring import make_handlers

        reply = make_handlers(cfg, box).handle(cmd, "terminal", operator=True)
        print(reply.text)
        return 1 if reply.error else 0

    return _on_box(cfg, run)


def _on_box(cfg, run) -> int:
    """``run(box)`` against the GPU box, closed after; a RemoteError is exit 2 with its words."""
    from remote.errors import RemoteError

    box = _box(cfg)
    try:
        return run(box)
    except RemoteError as e:
        print(f"hsx: {e}", file=sys.stderr)
        return 2
    finally:
        box.close()


# `hsx VERB --json`: the runner's own reply, for each verb a terminal has with --json
JSON_CALLS = {
    "status": lambda box, cmd: box.status().to_dict(),
    "logs": lambda box, cmd: {"lines": box.logs(cmd.n, cmd.which)},
    "verify": lambda box, cmd: box.verify(repair=cmd.repair, quick=cmd.quick),
    "adopt": lambda box, cmd: box.adopt(cmd.path),
    "start": lambda box, cmd: box.start(force=cmd.force),
    "resume": lambda box, cmd: box.resume(force=cmd.force),
    "preflight": lambda box, cmd: box.preflight(),
    "stop": lambda box, cmd: box.stop(),
    "compact": lambda box, cmd: box.compact(),
}


def _json_reply(box, cmd: Command) -> dict:
    """The runner's own reply to cmd."""
    return JSON_CALLS[cmd.verb](box, cmd)


def cmd_kind(args) -> int:
    """`hsx train VERB`, `hsx measure VERB`: the runner's reply as it is with --json (GpuBox's
    method of the kind's word runs `hsx-runner WORD VERB`); otherwise the chat's text."""
    cfg = load(args.config)
    kind: Kind = args.kind

    def run(box) -> int:
        if args.json:  # exits as the extraction's verbs do: 1 for a refusal or a failed export
            reply = box.call(kind.word, args.action)
            print(json.dumps(reply))
            return 0 if Answer.from_dict(reply).ok else 1
        from bot.wiring import make_handlers

        cmd = Command(args.action, kind=kind.name, confirmed=True)  # a terminal does not ask
        reply = make_handlers(cfg, box).handle(cmd, "terminal", operator=True)
        print(reply.text)
        return 1 if reply.error else 0

    return _on_box(cfg, run)


def cmd_bot(args) -> int:
    from bot.slack.app import run_bot

    cfg = load(args.config)  # a bad config is a clear error, not an exit code
    # A service's log (journald adds the time): what it refused, dropped or retried, not warnings alone.
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _terminate)  # a service stop: the same quick exit as Ctrl-C
    try:
        run_bot(cfg, http_port=args.http, http_host=args.http_host)
        code = 0
    except KeyboardInterrupt:
        code = 130
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    # End now: at a normal exit the interpreter would first wait for every reply still in
    # flight (an SSH call is bounded only by its own timeout). Their remote commands are
    # bounded there by `timeout`, and the watcher's state is written atomically.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    if code == 128 + signal.SIGTERM:  # die by the signal itself: systemd counts that a clean stop
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    os._exit(code)


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def cmd_deploy(args) -> int:
    from deploy.install import Options, main

    cfg = load(args.config)
    d = cfg.deploy  # flags override the config's [deploy]
    opts = Options(
        args.wheel,
        args.python or d.python,
        args.deps_from or d.deps_from,
        args.autostart or d.autostart,
        args.job_config,
    )
    return main(cfg, opts, args.json)


def cmd_demo(args) -> int:
    return demo.run(args)


def _add_verbs(sub) -> None:
    """`hsx VERB` for each verb of the table that a terminal has."""
    for v in EXTRACTION.verbs:
        if not v.terminal:
            continue
        s = sub.add_parser(v.name, help=v.help)
        s.add_argument("--config", default=None)
        if v.json:
            s.add_argument("--json", action="store_true")
        groups: dict = {}
        for f in v.flags:
            default = getattr(Command, f.field)  # the Command's own default
            if f.kind == "switch":
                s.add_argument(f.name, action="store_true", help=f.help or None)
            elif f.kind == "choice":
                if f.field not in groups:
                    groups[f.field] = s.add_mutually_exclusive_group()
                groups[f.field].add_argument(
                    f.name, dest=f.field, action="store_const", const=f.name[2:], default=default
                )
            elif f.kind == "count":
                s.add_argument("-" + f.field, type=int, default=default, metavar=f.name, help=f.help or None)
            else:
                s.add_argument(f.field, metavar=f.name, help=f.help or None)
        s.set_defaults(fn=cmd_verb)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hsx", description="run and watch hidden-state extraction")
    sub = p.add_subparsers(dest="verb", required=True)
    _add_verbs(sub)
    for kind in (k for k in KINDS.values() if k.word):  # each kind past the extraction: `hsx WORD VERB`
        s = sub.add_parser(kind.word, help=kind.description)
        s.add_argument("action", choices=[v.name for v in kind.verbs if v.terminal])
        s.add_argument("--config", default=None)
        s.add_argument("--json", action="store_true")
        s.set_defaults(fn=cmd_kind, kind=kind)
    s = sub.add_parser("bot", help="run the Slack bot (Socket Mode, or HTTP with --http PORT)")
    s.add_argument("--config", default=None)
    s.add_argument("--http", type=int, default=None, metavar="PORT")
    s.add_argument(
        "--http-host", default="127.0.0.1", metavar="HOST",
        help="the address --http listens on (default loopback, behind a TLS proxy; 0.0.0.0: every interface)",
    )  # fmt: skip
    s.set_defaults(fn=cmd_bot)
    s = sub.add_parser(
        "deploy", help="install or update hsx-runner, the patch and the job config on the GPU box"
    )
    s.add_argument("--config", default=None)
    s.add_argument("--json", action="store_true")
    s.add_argument("--wheel", default="", help="an hsx-ops wheel (default: build one from this checkout)")
    s.add_argument(
        "--python", default="", help="interpreter on the box that creates the venv ([deploy] python)"
    )
    s.add_argument(
        "--deps-from", default="", metavar="PYTHON",
        help="reuse this interpreter's packages on the box (same Python) instead of installing from the index",
    )  # fmt: skip
    s.add_argument(
        "--autostart",
        action="store_true",
        help="start the runner at boot (systemd; [deploy] autostart); off by default",
    )
    s.add_argument("--job-config", default="", help="install this file as runner_config (default: --config)")
    s.set_defaults(fn=cmd_deploy)
    s = sub.add_parser("demo", help="the whole loop on this machine: no GPU, Slack or SSH")
    s.add_argument("--workdir", default="hsx-demo")
    s.add_argument("--samples", type=int, default=500)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--headless", action="store_true", help="no console; end with the job")
    s.add_argument(
        "--pace", type=float, default=None, metavar="SECONDS",
        help=f"each request takes at least this long (default {demo.DEMO_PACE_S:g} with the console, 0 headless)",
    )  # fmt: skip
    s.add_argument(
        "--backend", choices=("reference", "sglang"), default="reference",
        help="sglang: the real patched SGLang on this CPU (builds its venv on first use)",
    )  # fmt: skip
    s.add_argument(
        "--target", choices=("demo", "kimi-k2.5", "llama3", "qwen3", "gpt-oss"), default="demo",
        help="a tiny copy of a real family's model directory, tokenizer and chat template",
    )  # fmt: skip
    s.add_argument(
        "--tp", type=int, choices=(1, 2, 4), default=1,
        help="with --backend sglang: tensor-parallel ranks, one scheduler process each",
    )  # fmt: skip
    s.add_argument(
        "--stages", default=None, metavar="A,B",
        help="the pipeline it runs (default regenerate,extract,train; with --backend sglang also measure); "
        "extract: the extraction alone",
    )  # fmt: skip
    s.set_defaults(fn=cmd_demo)
    return p


@quiet_when_stdout_closes
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "samples", 1) < 1:
        print("hsx: --samples must be at least 1", file=sys.stderr)
        return 2
    if (getattr(args, "pace", None) or 0) < 0:
        print("hsx: --pace must be 0 (full speed) or more seconds", file=sys.stderr)
        return 2
    # Ctrl-C works even when the shell that started us ignored SIGINT (a background job
    # of a non-interactive shell inherits that, and Python then never raises KeyboardInterrupt).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return args.fn(args)
    except HsxError as e:
        print(f"hsx: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
