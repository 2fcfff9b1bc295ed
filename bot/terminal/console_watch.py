"""The watcher in the terminal (`hsx demo`'s console): its alerts, milestones and done said
between prompts, as the channel would get them. The pinned progress message is left out:
"progress?" answers it. A Resume button is the command to type. The console's user is an
operator: the full text, Slack's shortcodes as emoji."""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import TextIO

from bot.render.mrkdwn import for_terminal
from bot.verbs.table import kind_of_key
from bot.watch.action import Action
from bot.watch.watcher import Watcher, schedule
from runner.contract.config import Config

CHANNEL = "console"


class ConsoleWatcher(Watcher):
    def __init__(self, box, cfg: Config, out: TextIO, lock: threading.Lock, prompt: str = ""):
        state = os.path.join(os.path.dirname(os.path.abspath(cfg.path or ".")), "console-watch.json")
        cfg = dataclasses.replace(  # its own state: a bot on the same config keeps its own
            cfg,
            slack=dataclasses.replace(cfg.slack, alert_channel=CHANNEL),
            watcher=dataclasses.replace(cfg.watcher, state_file=state),
        )
        super().__init__(box, cfg, client=None)
        self.out, self.lock, self.prompt = out, lock, prompt

    def deliver(self, a: Action, st) -> None:
        if a.kind == "progress":
            return
        kind = kind_of_key(a.key)
        press = f"\n(Resume: type {kind.slash} {kind.resume})" if a.resume else ""
        with self.lock:
            self.out.write(f"\n{for_terminal(a.private or a.text)}{press}\n{self.prompt}")  # an operator's
            self.out.flush()


def watch_in_console(box, cfg: Config, out: TextIO, lock: threading.Lock, prompt: str):
    """The watcher's background job for the console; its scheduler (shut it down at the end)."""
    return schedule(ConsoleWatcher(box, cfg, out, lock, prompt), cfg.watcher.interval_s)
