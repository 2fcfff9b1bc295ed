"""Each module registers its own listeners on the app."""

from __future__ import annotations

from ..runtime import Runtime
from . import actions, commands, messages


def register(app, rt: Runtime) -> None:
    for module in (messages, commands, actions):
        module.register(app, rt)
