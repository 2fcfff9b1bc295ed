"""The pinned progress message: one message for whatever runs now, saying what "progress?" says
of it (bot/verbs/progress.py ``said``: the same texts and blocks, no renderer of its own).

- A pipeline that runs: its line first (stage k of n), then its stage under way in that kind's
  words, from the stage's own record within the pipeline's reply; then any other kind that runs
  beside it.
- Else each kind that runs, in "progress?"'s order (the extraction, the training, the
  measurement, the regeneration).
- Nothing runs: what it showed last, in its end (a done or a crash stays in view until the next
  run); a watcher that has shown nothing yet shows the pipeline once one has started, else the
  extraction.

Edited at most every ``progress_update_s``, and at once when what it shows changes: another kind,
another stage, another phase. It reads nothing itself: each record is the one this tick read for
its judge (``seen``, by KINDS name). A tick that could not read the box's status, or a kind the
message shows, leaves the message as it is: a missed read is no news that the kind stopped.
Another kind's failed read is logged by the watcher; the message says what could be read."""

from __future__ import annotations

import copy
import datetime as dt

from bot.verbs import pipeline
from bot.verbs.progress import plain, said
from bot.verbs.table import EXTRACTION, KINDS, PIPELINE
from bot.watch.action import Action
from runner.contract.pipeline import ACTIVE
from runner.contract.status import StatusRecord, now_iso, parse_iso

ORDER = tuple(name for name in KINDS if name != PIPELINE.name)  # the table's, as "progress?"'s


def _runs(name: str, rec) -> bool:
    if name == PIPELINE.name:
        return rec.get("phase") in ACTIVE
    return rec.phase.is_active() if isinstance(rec, StatusRecord) else rec.active


def _phase(name: str, rec) -> str:
    if name == PIPELINE.name:
        stage = rec.get("stage")
        return f"{rec.get('phase')}:{stage}:{(rec.get('phases') or {}).get(stage)}"
    return getattr(rec.phase, "value", rec.phase)


def shown(last: list[str], seen: dict) -> list[str]:
    """The kinds the message shows now, by KINDS name; ``last``: what it showed before."""
    d = seen.get(PIPELINE.name)
    runs = [PIPELINE.name] if d is not None and _runs(PIPELINE.name, d) else []
    stage = pipeline.STAGES.get(d.get("stage"), "") if runs else ""  # said within the pipeline's
    runs += [n for n in ORDER if n in seen and n != stage and _runs(n, seen[n])]
    if runs:
        return runs
    if kept := [n for n in last if n in seen]:
        return kept
    return [PIPELINE.name] if d is not None and d.get("started_at") else [EXTRACTION.name]


def _parts(name: str, rec, now: dt.datetime, stale_s: float, ask: str) -> list[tuple[str, list[dict]]]:
    """A kind's part, a member's (the channel reads it); the pipeline's with its stage's after it."""
    out = [said(name, rec, now, False, ask, stale_s)]
    if name == PIPELINE.name:
        try:
            own = pipeline.stage_record(rec)
            if own is not None:
                out.append(said(pipeline.STAGES[rec["stage"]], own, now, False, ask, stale_s))
        except pipeline.UNREAD:  # its phase alone, as `/pipeline status` says it
            out.append(plain(pipeline.stage_text(rec, now, False), ask))
    return out


def judge(st, seen: dict, now: dt.datetime, lim, ask: str = "", read=()) -> tuple[list[Action], object]:
    """Pure: the watcher's state and this tick's records (``read``: the kinds the watcher reads)
    → the progress message to post or edit, if due, and the next state."""
    st = copy.deepcopy(st)
    last = [n for n in st.progress_of if n in read]  # a kind no longer read is no longer shown
    if EXTRACTION.name not in seen or any(n not in seen for n in last):
        return [], st
    names = shown(last, seen)
    phases = " · ".join(f"{n}:{_phase(n, seen[n])}" for n in names)
    at = parse_iso(st.progress_at)
    if at is not None and (now - at).total_seconds() < lim.progress_update_s and phases == st.progress_phases:
        return [], st
    parts = [p for n in names for p in _parts(n, seen[n], now, lim.heartbeat_stale_s, ask)]
    text = "\n\n".join(t for t, _ in parts)
    blocks = [b for _, bs in parts for b in bs]
    st.progress_at, st.progress_of, st.progress_phases = now_iso(now), names, phases
    return [Action("progress", text, blocks=blocks)], st
