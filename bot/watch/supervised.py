"""What the judges of the kinds a supervisor runs share (train_watch, measure_watch,
regenerate_watch), each parametrised by its kind: a post in two sets of words, the channel's and the
operators'; and, for a run whose record's heartbeat is written as its work commits (the
measurement's, the regeneration's), its stall and its alerts."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable

from bot.verbs.table import Kind
from bot.watch import standing
from bot.watch.action import Action
from bot.watch.posted import MAX_KEYS, Posted
from runner.contract.status import age_s
from runner.text.human import human_duration


def judged(of: Kind, st, run: str, find: Callable[[Posted], tuple[list[Action], list[Action]]]):
    """A judge's frame: the watcher's state copied, nothing before a ``run`` begins (its
    ``started_at``), else ``find(posted)``'s actions for this run: the first list posted once
    per key, the second (milestones ``posted.reached`` counts) as found."""
    st = copy.deepcopy(st)
    if not run:
        return [], st
    p = st.kinds.setdefault(of.name, Posted())
    p.start(run)  # kept by a resume: the run's milestones are said once
    found, later = find(p)
    out = [a for a in found if a.key not in p.active]
    p.active = (p.active + [a.key for a in out])[-MAX_KEYS:]
    return out + later, st


def post(render, kind: str, head: str, rec, now: dt.datetime | None, key: str, why: str = "", tail: str = "",
         **kw) -> Action:  # fmt: skip
    """One post of a kind whose record ``render(rec, now, full)`` draws: the channel's text without
    paths or the box's own words; the operators' with them (``why`` after the head), when they
    differ."""
    text = f"{head}\n{render(rec, now, full=False)}{tail}"
    private = f"{head}{why}\n{render(rec, now)}{tail}"
    return Action(kind, text, key=key, private=private if private != text else "", **kw)


def stalled(of: Kind, rec, working: str, stall_s: float, now: dt.datetime, quiet_for: str,
            where: str) -> tuple[str, str] | None:  # fmt: skip
    """(key, headline) when the run of ``of``, in its phase ``working``, has written no heartbeat
    for over ``stall_s``: "Measurement STALLED: ``quiet_for`` for 6m00s``where``". The key names
    the quiet stretch by what was done when it began."""
    if rec.phase != working:
        return None
    quiet = age_s(rec.heartbeat, now)
    if quiet is None or quiet <= stall_s:
        return None
    head = f":warning: {of.name.capitalize()} STALLED: {quiet_for} for {human_duration(quiet)}{where}"
    return f"{of.key}stalled:{rec.started_at}:{rec.done}", head


def alerts(of: Kind, rec, now: dt.datetime, say, stall: tuple[str, str] | None, kept: str,
           ended: bool = True) -> list[Action]:  # fmt: skip
    """The alerts of a run ``of`` a supervisor holds (the measurement's, the regeneration's), each
    keyed by its episode: a crash (by the launch's pid) or a failure, with the reason for operators
    and a Resume button; a server restart, by its count; a ``stall`` (``stalled``), without a
    button: the supervisor still holds the run, so the alert says to stop first (``kept``: what
    a resume keeps). ``say``: the kind's ``post``; ``ended``: False where the run's crash or
    failure is already its ranks' alerts (on Slurm)."""
    name, run, out = of.name.capitalize(), rec.started_at, []
    if ended and (key := standing.ended_key(of, rec.to_dict())):
        out.append(say("alert", f":rotating_light: {name} {rec.phase.upper()}", rec, now, key,
                       why=f": {rec.reason or 'no reason given'}", resume=True))  # fmt: skip
    if rec.restarts:
        head = f":warning: {name}'s server restarted ({rec.restarts} so far)"
        out.append(say("alert", head, rec, now, f"{of.key}restarts:{run}:{rec.restarts}"))
    if stall:
        resume = f"`{of.slash} {of.resume}`"
        tail = (
            f"\nthe supervisor still runs, so {resume} is refused; if it stays silent: "
            f"`{of.slash} stop`, then {resume} ({kept})"
        )
        out.append(say("alert", stall[1], rec, now, stall[0], tail=tail))
    return out
