"""A record's plain fields as JSON brought them, checked against the dataclass that owns them.

One rule for the status record and the entries it carries: each known key must hold what its
annotation says (``int``, ``float``, ``str``, ``bool``, ``dict``, ``None`` and unions of them), so
a malformed record is refused by name where it is read, never later in a renderer.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .errors import StatusError


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return is_int(v) or (isinstance(v, float) and math.isfinite(v))


CHECKS = {
    "int": (is_int, "an integer"),
    "float": (is_number, "a number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "dict": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "None": (lambda v: v is None, "null"),
}


def check(where: str, name: str, value: Any, kinds: str) -> None:
    """``kinds``: an annotation such as ``"int | None"``."""
    names = [k.strip() for k in kinds.split("|")]
    if not any(CHECKS[k][0](value) for k in names):
        words = " or ".join(CHECKS[k][1] for k in names)
        raise StatusError(f"{where} field {name!r} is not {words} (got {type(value).__name__})")


def update(where: str, kinds: dict[str, str], phases: tuple[str, ...], d: dict, kw: dict) -> None:
    """A writer's update of its record ``d``, typed as the reader's (``kinds``: each field's
    annotation): an unknown field, a wrong kind or another kind's phase fails here, before
    anything of ``kw`` is kept."""
    for k, v in kw.items():
        if k not in kinds:
            raise KeyError(f"{where} has no field {k!r}")
        if k == "phase" and v not in phases:
            raise StatusError(f"{where} has unknown phase {v!r}")
        check(where, k, v, kinds[k])
    d.update(kw)


def plain(cls: type, d: dict, where: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keys of ``d`` that ``cls`` knows, each checked; ``skip`` names the ones the caller
    checks itself (enums, nested records)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            if f.name not in skip:
                check(where, f.name, d[f.name], str(f.type))
            out[f.name] = d[f.name]
    return out


def short(v: Any, limit: int = 40) -> str:
    """A value from the box, quoted in an error: never long."""
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 1] + "…"
