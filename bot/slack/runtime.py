"""What every listener needs, built once by app.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.slack.seen import SeenIds
from bot.verbs.handlers import Handlers
from runner.contract.config import Config


@dataclass
class Runtime:
    cfg: Config
    handlers: Handlers
    events: SeenIds  # Slack event ids already handled (retried deliveries)
    buttons: SeenIds  # alert Resume buttons already used
    is_member: Callable[[str], bool] = lambda user: False  # of a watched channel (DMs)
