"""Where hsx may be asked from, and how often: one rule for messages, commands and buttons.

A channel the bot serves (`[slack] channels` and `alert_channel`) is open to its members
(only they can write there, guests included); a direct message, to a member of one of them;
any other place, to no one. With no channel configured (a trial set-up) every place is open.
Who may run what is the kinds table's rule (`table`, applied in `handlers.Handlers`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from runner.contract.config import Config


def served(cfg: Config) -> list[str]:
    """The channels the bot answers in."""
    alert = [cfg.slack.alert_channel] if cfg.slack.alert_channel else []
    return list(dict.fromkeys([*cfg.slack.channels, *alert]))


def refusal(cfg: Config, is_member: Callable[[str], bool], channel: str, user: str, name: str = "") -> str:
    """'' when user may ask hsx from channel (name: Slack's channel_name, when it says);
    else the reason, to tell them."""
    places = served(cfg)
    if not places:
        return ""
    if name == "directmessage" or channel.startswith("D"):
        try:
            member = bool(is_member(user))
        except Exception:  # a Slack lookup failure must not open the door
            member = False
        return "" if member else "hsx answers direct messages only from members of its channels"
    if channel in places:
        return ""
    return "hsx answers only in " + ", ".join(f"<#{c}>" for c in places)


class Allowance:
    """At most one use per key (a person and a verb) every so many seconds, in memory: a
    restart forgives. What an expensive read costs the box is bounded per person."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, float]] = {}  # key -> (when, its interval)

    def take(self, key: str, every_s: float) -> float:
        """0 when key may go now (and it is counted); else the seconds until it may."""
        with self._lock:
            now = self.clock()
            last = self._last.get(key)
            if last is not None and now - last[0] < every_s:
                return every_s - (now - last[0])
            self._last[key] = (now, every_s)
            if len(self._last) > 10_000:  # forget what is past its interval
                self._last = {k: v for k, v in self._last.items() if now - v[0] < v[1]}
            return 0.0

    def give_back(self, key: str) -> None:
        """The use did nothing (the box unreachable, a verb refused): it does not count."""
        with self._lock:
            self._last.pop(key, None)
