"""The published figures a measured draft is set beside: runner/assets/published.json (its
source named in the file; scripts/published.py writes it), chosen by ``[measure] reference``, the
target's name as published ("Kimi-K2-Instruct"), for the settings this run measures."""

from __future__ import annotations

import functools
import json
import os

PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "published.json")
SHOWN = ("benchmark", "setting", "batch", "accept_length", "speedup", "draft")


@functools.cache
def table() -> dict:
    with open(PATH, encoding="utf-8") as f:
        return json.load(f)


def targets() -> list[str]:
    return sorted({f["target"] for f in table()["figures"]})


def refusal(reference: str) -> str | None:
    """Why ``[measure] reference`` names no published target (matched without case), or None."""
    if not reference or reference.lower() in {t.lower() for t in targets()}:
        return None
    return f"[measure] reference {reference!r} is not a target with published figures; one of: {', '.join(targets())}"


def beside(reference: str, settings: list[str]) -> list[dict]:
    """The published figures of ``reference`` at ``settings``, every benchmark and batch size,
    each naming its source (the table's name: the file says where in full)."""
    want = reference.lower()
    return [
        {**{k: f[k] for k in SHOWN}, "source": table()["name"]}
        for f in table()["figures"]
        if want and f["target"].lower() == want and f["setting"] in settings
    ]


def source() -> str:
    return table()["source"]
