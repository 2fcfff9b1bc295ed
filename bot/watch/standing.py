"""Which alert of a run stands, by its key: the one a Resume button carries. A crash is keyed by
its run and its launch, a failure by its run and its end, so a button on an alert whose run has
since been resumed, has ended, or was started again no longer matches the record read now, and
its click is refused instead of resuming a run nobody was asked about (issue 47). The
extraction's and a Slurm rank's alerts are judged by their own conditions, not here."""

from __future__ import annotations

from typing import Any

from bot.verbs.table import KINDS, TRAINING, Kind

ENDED = ("crashed", "failed")


def ended_key(of: Kind, d: dict[str, Any]) -> str | None:
    """The crash or failure alert's key of a supervised kind's run (the measurement's, the
    regeneration's, the pipeline's) in the record ``d``; None: it is neither."""
    phase = d.get("phase")
    if phase not in ENDED:
        return None
    episode = d.get("pid") if phase == "crashed" else d.get("ended_at")
    return f"{of.key}{phase}:{d.get('started_at')}:{episode}"


def train_crash_key(d: dict[str, Any]) -> str | None:
    """The training's crash alert's key: its run and its launch."""
    if d.get("phase") != "crashed":
        return None
    return f"{TRAINING.key}crashed:{d.get('run_id')}:{d.get('launches')}"


def judged(key: str) -> Kind | None:
    """The kind whose record says whether the alert ``key`` stands; None: not one judged here."""
    kind = next((k for k in KINDS.values() if k.key and key.startswith(k.key)), None)
    if kind is None or not key.removeprefix(kind.key).startswith(ENDED):
        return None
    return kind


def stands(key: str, d: dict[str, Any]) -> bool:
    """Whether the record ``d`` of the alert's kind (``judged(key)``) still shows that alert."""
    kind = judged(key)
    now = train_crash_key(d) if kind is TRAINING else ended_key(kind, d) if kind else None
    return now == key
