"""What a free-gpus confirmation carries: the units its question named and when it expires.

A click hours later must not stop whatever holds the GPUs then, so the button's value binds
the units shown, with an expiry; the box refuses once either no longer holds."""

from __future__ import annotations

import json
import time

from runner.contract.replies import UNIT_NAME_RE, PreflightReport
from runner.text import extraction

CONFIRM_S = 300  # a free-gpus question binds its units for this long
MAX_VALUE_CHARS = 2000  # Slack's limit on a button's value


def bind(units: list[str]) -> tuple[str, int]:
    """The button's value for these units, and its expiry (epoch s)."""
    until = int(time.time()) + CONFIRM_S
    return json.dumps({"verb": "free-gpus", "units": list(units), "until": until}), until


def bound(value: object) -> tuple[tuple[str, ...], int] | None:
    """(units, until) from a value ``bind`` made; an older button's bare "free-gpus" binds
    nothing and reads as long expired; None: not such a value."""
    if value == "free-gpus":
        return (), 0
    try:
        d = json.loads(value) if isinstance(value, str) and len(value) <= MAX_VALUE_CHARS else None
    except ValueError:
        return None
    if not isinstance(d, dict) or d.get("verb") != "free-gpus":
        return None
    units, until = d.get("units"), d.get("until")
    if not (
        isinstance(units, list)
        and units
        and all(isinstance(u, str) and UNIT_NAME_RE.fullmatch(u) for u in units)
    ):
        return None
    if not isinstance(until, int) or isinstance(until, bool):
        return None
    return tuple(units), until


def free_gpus_reply(report: dict) -> dict:
    """preflight --free-gpus as an action reply: ok when the GPUs are free afterwards; the
    message names who held them and what stopping each unit did (summarised, never cut), or
    why nothing was stopped."""
    gpus = PreflightReport.from_dict(report).check("gpus")
    if not gpus:
        return {"ok": False, "message": "no gpus check"}
    if gpus.refused:
        return {"ok": False, "message": f"nothing stopped: {gpus.refused}; ask again"}
    return {"ok": gpus.ok, "message": extraction.gpus_text(gpus.holders, gpus.results) or gpus.detail}
