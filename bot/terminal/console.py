"""A terminal chat with the same parser, handlers and renderer as Slack (`hsx demo`)."""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import TextIO

from bot.render.mrkdwn import for_terminal
from bot.verbs.commands import Command, confirmed_command, parse
from bot.verbs.progress import progress
from bot.verbs.table import TRAINING, kind_of_text
from bot.wiring import make_handlers
from runner.contract import timing
from runner.contract.config import Config

PROMPT = "hsx> "
GREETING = (
    'Ask "progress?" or type /extract help (/train help: the draft; /measure help: it in SGLang; '
    "/regenerate help: the data's answers by the target; /pipeline help: the stages as one). "
    "End with Ctrl-D."
)


def run_console(
    box,
    cfg: Config,
    inp: TextIO = sys.stdin,
    out: TextIO = sys.stdout,
    user: str = "console",
    chart_dir: str | None = None,
    watch: bool = False,
) -> None:
    """Answer lines from inp until end of input. The console user is an operator. ``watch``:
    the watcher's alerts and milestones are said between the answers (bot/terminal/console_watch.py)."""
    handlers = make_handlers(cfg, box)
    out.write(GREETING + "\n")
    lock, watcher = threading.Lock(), None
    if watch:
        from bot.terminal.console_watch import watch_in_console

        watcher = watch_in_console(box, cfg, out, lock, PROMPT)
    try:
        _answer(handlers, cfg, inp, out, user, chart_dir, lock)
    finally:
        if (
            watcher is not None
        ):  # a pass under way ends and keeps what it said: the next console repeats nothing
            watcher.shutdown(wait=True)


def _answer(handlers, cfg: Config, inp: TextIO, out: TextIO, user: str, chart_dir: str | None, lock) -> None:
    while True:
        with lock:
            out.write(PROMPT)
            out.flush()
        line = inp.readline()
        if not line:
            out.write("\n")
            out.flush()
            return
        if not line.strip():
            continue
        cmd = parse(line.rstrip("\n"), kind_of_text(line))
        if cmd == Command("status"):  # "progress?": the extraction's answer and the training's
            reply = progress(handlers, user, operator=True)
        else:
            with _building(handlers.box, out, lock, cmd.kind == TRAINING.name and cmd.verb in BUILDS):
                reply = handlers.handle(cmd, user, operator=True)
        if reply.confirm:
            out.write(reply.text + " [y/N] ")
            out.flush()
            answer = inp.readline().strip().lower()
            if answer not in ("y", "yes"):
                stop = confirmed_command(reply.confirm)
                said = (
                    "not stopped"
                    if stop and stop.verb == "stop"
                    else f"{reply.confirm}: not confirmed, nothing done"
                )
                out.write(said + "\n")
                continue
            reply = handlers.handle(
                confirmed_command(reply.confirm_value or reply.confirm), user, operator=True
            )
        with lock:
            out.write(for_terminal(reply.text) + "\n")
            if reply.audit and reply.audit not in reply.text:
                out.write(reply.audit + "\n")
            if reply.image is not None:
                out.write(_save_chart(reply.image, chart_dir or cfg.job.out or ".", reply.image_name) + "\n")
            out.flush()


BUILDS = ("start", "resume")  # the training verbs that build the trainer's venv on its first use


@contextlib.contextmanager
def _building(box, out: TextIO, lock, watch_it: bool = True):
    """While a training verb runs, each step of a venv build as the box's status says it (the
    build's own progress goes to the box's stderr, which no terminal of the console shows)."""
    if not watch_it:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        said = None
        while not done.wait(timing.current().headless_poll_s):
            try:
                now = box.record("train").building
            except Exception:  # noqa: BLE001 - a status read that fails says nothing here
                continue
            if now and now != said:
                with lock:
                    out.write(f"  {now}\n")
                    out.flush()
                said = now

    t = threading.Thread(target=watch, name="hsx-console-build", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()


def _save_chart(png: bytes, folder: str, name: str) -> str:
    import os

    path = os.path.join(folder, name)
    try:
        with open(path, "wb") as f:
            f.write(png)
    except OSError as e:
        return f"chart not saved ({e})"
    return f"chart saved to {path}"
