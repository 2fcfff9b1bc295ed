"""Each module registers its own listeners on the app."""

from __future__ import annotations

from bot.slack.listeners import actions, commands, messages
from bot.slack.runtime import Runtime


def register(app, rt: Runtime) -> None:
    for module in (messages, commands, actions):
        module.register(app, rt)
