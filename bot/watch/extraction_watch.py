"""The watcher's judging of the extraction's status record: what is an alert (a crash, a rank
that failed, a stale heartbeat, a server restart, an error spike, a stall, a rate drop, the disk),
its milestones and done, and the limits the watcher judges the box by. What was posted lives in
the extraction's part of the watcher's state (``Posted``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from bot.verbs.table import EXTRACTION
from bot.watch.action import Action
from bot.watch.posted import MAX_KEYS, Posted
from runner.contract import status
from runner.contract.config import Config
from runner.contract.ranks import ALERTING
from runner.contract.status import Phase, StatusRecord, age_s
from runner.text import extraction, human

PROGRESS_UPDATE_S = 60.0  # edit the pinned message at most this often, unless the phase changes
ERROR_SPIKE = 10  # this many new errors between two polls is an alert


@dataclass(frozen=True)
class Limits:
    milestone_pct: int = 10
    heartbeat_stale_s: float = status.STALE_S
    unreachable_alert_s: float = 300.0
    error_spike: int = ERROR_SPIKE  # when the record does not say how many requests are out
    progress_update_s: float = PROGRESS_UPDATE_S
    stall_after_s: float = 300.0
    rate_drop_after_s: float = 600.0

    @classmethod
    def from_config(cls, cfg: Config) -> Limits:
        w = cfg.watcher
        return cls(
            max(1, w.milestone_pct), w.heartbeat_stale_s, w.unreachable_alert_s,
            stall_after_s=w.stall_after_s, rate_drop_after_s=w.rate_drop_after_s,
        )  # fmt: skip


def conditions(rec: StatusRecord, prev, lim: Limits, now: dt.datetime) -> dict[str, tuple[str, bool]]:
    """Alert keys that are true now → (headline, offer Resume). A key names one episode; ``prev``
    is the watcher's state at the last poll."""
    run = rec.started_at or ""
    out: dict[str, tuple[str, bool]] = {}
    bad_ranks = [r for r in rec.ranks or [] if r.state in ALERTING]
    for r in bad_ranks:  # one alert per rank episode: its Slurm task and what happened to it
        where = f" (node {r.node})" if r.node else ""
        out[f"rank:{r.rank}:{r.job}:{r.state.value}"] = (f"Rank {r.rank} {r.word()}{where}", True)
    if rec.phase.is_failed() and not bad_ranks:  # a cluster run's failure is its ranks' alerts
        out[f"{rec.phase.value}:{run}:{rec.phase_since}"] = (f"Extraction {rec.phase.value.upper()}", True)
    if status.is_stale(rec, now, lim.heartbeat_stale_s):
        age = status.heartbeat_age(rec, now)
        out[f"stale:{run}:{rec.heartbeat_at}"] = (f"No heartbeat for {human.human_duration(age)}", True)
    if rec.server.restarts:
        why = f": {rec.server.last_death}" if rec.server.last_death else ""  # which rank, from its log
        out[f"restarts:{run}:{rec.server.restarts}"] = (
            f"Server restarted ({rec.server.restarts} so far){why}",
            False,
        )
    same_run = prev.run == run and prev.errors is not None
    spike = max(3, rec.in_flight) if rec.in_flight else lim.error_spike  # a round of requests failing
    if same_run and rec.errors_this_run - prev.errors >= spike:
        new = rec.errors_this_run - prev.errors
        out[f"errors:{run}:{rec.errors_this_run}"] = (
            f"Error spike: {new} new errors since the last check ({rec.in_flight} requests in flight)",
            False,
        )
    out.update(_flow(rec, lim, now))
    # one disk episode per run: the forecast and the pause it leads to are the same story
    if rec.phase is Phase.PAUSED:
        out[f"disk:{run}"] = (f"Extraction PAUSED: {rec.reason or 'no reason given'}", True)
    elif rec.phase.is_active() and rec.disk.need is not None and rec.disk.need > rec.disk.free:
        out[f"disk:{run}"] = ("Disk will run out before the job ends", False)
    return out


RESOLVES = {"stalled": "STALLED", "ratedrop": "Rate drop"}  # alerts whose end is posted too


def _flow(rec: StatusRecord, lim: Limits, now: dt.datetime) -> dict[str, tuple[str, bool]]:
    """STALLED (no commit for long) and a rate drop, while extracting. A key names one episode:
    the last commit (or the moment the rate fell) it began at."""
    if rec.phase is not Phase.EXTRACTING:
        return {}
    out, run = {}, rec.started_at or ""
    # nothing committed yet this run: quiet since extracting began; a record from a runner that
    # does not report its last commit cannot be judged
    since = rec.last_commit_at or (rec.phase_since if rec.done_this_run == 0 else None)
    quiet = age_s(since, now)
    floor = max(lim.stall_after_s, 10 * (rec.latency_p50_s or 0.0))
    if quiet is not None and quiet > floor:
        what = f"{rec.in_flight} request{'s' if rec.in_flight != 1 else ''} in flight"
        if rec.oldest_in_flight_idx is not None and rec.oldest_in_flight_s is not None:
            what += f", the oldest (sample {rec.oldest_in_flight_idx}) out for {human.human_duration(rec.oldest_in_flight_s)}"
        out[f"stalled:{run}:{since}"] = (
            f"STALLED: no sample committed for {human.human_duration(quiet)} ({what})",
            False,
        )
    low = age_s(rec.rate_low_since, now)
    if low is not None and low >= lim.rate_drop_after_s and rec.rate_median:
        out[f"ratedrop:{run}:{rec.rate_low_since}"] = (
            f"Rate drop: {rec.rate or 0:.2f} samples/s for {human.human_duration(low)}, "
            f"under half this run's median {rec.rate_median:.2f}/s",
            False,
        )
    return out


def judge(
    st, rec: StatusRecord, lim: Limits, now: dt.datetime, text: str
) -> tuple[list[Action], list[Action]]:
    """One record judged: the alerts (and the ends of those that ended), then the milestones and
    done, which go in the progress message's thread. ``st``, the watcher's state, gets the
    extraction's part updated."""
    p = st.kinds.setdefault(EXTRACTION.name, Posted())
    conds = conditions(rec, st, lim, now)
    where = rec.host or "the GPU box"
    alerts = []
    for key in p.active:  # an episode that ended: say so, once
        kind = key.split(":", 1)[0]
        if key not in conds and kind in RESOLVES:
            head = f":white_check_mark: {RESOLVES[kind]} resolved on {where}"
            alerts.append(Action("recovered", f"{head}\n{text}", key=key))
    keep = [k for k in p.active if k in conds]
    for key, (head, resume) in conds.items():
        if key not in p.active:
            body = (
                text
                if not rec.last_error or rec.last_error in text
                else f"{text}\nlast error: {rec.last_error}"
            )
            if rec.phase.is_failed() and extraction.log_block(rec):
                body += "\n" + extraction.log_block(rec)
            alerts.append(
                Action("alert", f":rotating_light: {head} on {where}\n{body}", key=key, resume=resume)
            )
            keep.append(key)
    p.active = keep[-MAX_KEYS:]

    later = []
    job = f"{rec.job}:{rec.total}"
    p.start(job)
    reached = p.reached(rec.done, rec.total, lim.milestone_pct) if rec.total else 0
    if reached and not rec.phase.is_failed():  # a failed record's counts are in its alert, not a milestone
        later.append(Action("milestone", f"{reached}% reached\n{text}", key=f"milestone:{job}:{reached}"))
    for r in rec.ranks or []:  # a Slurm task requeued (its time limit, a preemption, a node): once each
        key = f"requeue:{r.job}:{r.requeues}"
        if (
            r.requeues and key not in p.requeued and r.state not in ALERTING
        ):  # past its budget: the alert says it
            p.requeued = (p.requeued + [key])[-MAX_KEYS:]
            times = {1: "once", 2: "twice"}.get(r.requeues, f"{r.requeues} times")
            said = f"Rank {r.rank} requeued {times} ({r.requeued_for or 'by Slurm'}); it resumes at {r.done:,} / {r.total:,}"
            later.append(Action("milestone", said, key=key))
    # done, once the hand-off to training ([train]) has ended: the text says what came of it
    if rec.phase is Phase.DONE and p.milestone < 100 and rec.handoff != status.HANDOFF_PENDING:
        later.append(Action("done", f":white_check_mark: {text}", key=f"done:{job}"))
        p.milestone = 100
    return alerts, later
