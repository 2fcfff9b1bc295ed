"""What every listener needs, built once by app.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runner.contract.config import Config

from .handlers import Handlers
from .seen import SeenIds


@dataclass
class Runtime:
    cfg: Config
    handlers: Handlers
    events: SeenIds  # Slack event ids already handled (retried deliveries)
    buttons: SeenIds  # alert Resume buttons already used
    is_member: Callable[[str], bool] = lambda user: False  # of a watched channel (DMs)
