"""The regeneration's Slurm ranks as one record, pure: from what was already read (cluster.json,
Slurm's word for each rank's task, each rank's own record, whether the output is written, the
time). A rank's state is the extraction's rule (``slurm_merge.rank_state``); rows are summed, the
rates over the ranks that run, the ETA is the slowest rank's. No file, process or clock is
touched here."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

from ..contract.ranks import ALERTING, LIVE, RankEntry, RankState
from ..contract.regenerate import RegenerateRecord
from ..contract.status import Phase, age_s, now_iso, parse_iso
from .slurm_merge import QUEUED, RUNNING, Task, describe, rank_state, task_ids

ORDER = ("regenerating", "starting_server", "preflight")  # the merged phase: the furthest a live rank is
RECENT_S = 30.0  # the history: a rank's rates count in the sum this long after its last point
UNWRITTEN = "every row is committed but the output is not written (its writer ended first): resume writes it"


@dataclass(frozen=True)
class Seen:
    """A rank's record as ``rank_state`` reads it."""

    phase: Phase
    heartbeat_age_s: float | None


@dataclass
class Inputs:
    state: dict  # cluster.json in the run dir: ranges, each rank's latest job, stop_requested_at
    tasks: dict[int, Task]  # rank -> Slurm's word for its latest task; absent: Slurm no longer knows it
    records: list[RegenerateRecord | None]  # per rank, status.rankR.json; None: none readable
    written: bool  # the output file exists
    now: dt.datetime


def complete(rec: RegenerateRecord | None, lo: int, hi: int) -> bool:
    """A rank says done only once every row of its range is committed."""
    return rec is not None and rec.phase == "done" and rec.done >= hi - lo


def entries(i: Inputs) -> list[tuple[RankEntry, RegenerateRecord | None]]:
    ids = task_ids(i.state)
    stop = bool(i.state.get("stop_requested_at"))
    out = []
    for r, (lo, hi) in enumerate(i.state["ranges"]):
        rec = i.records[r] if r < len(i.records) else None
        age = age_s(rec.heartbeat, i.now) if rec else None
        task = i.tasks.get(r)
        seen = Seen(Phase(rec.phase), age) if rec else None
        state = rank_state(task, seen, complete(rec, lo, hi), stop, r in ids)
        running = rec is not None and state is RankState.RUNNING
        e = RankEntry(
            rank=r, lo=lo, hi=hi, state=state, job=ids.get(r), slurm=task.state if task else None,
            node=task.node if task else "", slurm_reason=task.reason if task else "",
            phase=rec.phase if rec else None, total=hi - lo, done=rec.done if rec else 0,
            failed=rec.failed if rec else 0, rate=rec.rows_per_s if running else None,
            eta_s=rec.eta_s if running else None, heartbeat_age_s=age, reason=(rec.reason or None) if rec else None,
            requeues=rec.requeues if rec else 0, requeued_for=rec.requeued_for if rec else None,
        )  # fmt: skip
        out.append((e, rec))
    return out


def _sum(xs) -> float | None:
    got = [x for x in xs if x is not None]
    return sum(got) if got else None


def _newest(es, field: str) -> str | None:
    """A field of the rank whose record is newest among those that have it, named by its rank."""
    got = [
        (r.heartbeat or "", e.rank, getattr(r, field)) for e, r in es if r is not None and getattr(r, field)
    ]
    if not got:
        return None
    _, rank, text = max(got)
    return f"rank {rank}: {text}"[:500]


def _progress(r: RegenerateRecord) -> str | None:
    """When a rank last moved on: its last commit while it regenerates (a rank's heartbeat is
    written every few seconds besides, so the watcher's stall clock reads this), else its record."""
    return (r.committed_at or r.heartbeat) if r.phase == "regenerating" else r.heartbeat


def merge(i: Inputs, base: RegenerateRecord) -> RegenerateRecord:
    """The ranks as one record; ``base`` carries what the config names (the paths). Its heartbeat
    is the newest progress of any rank, as a box's record is written as rows commit."""
    es = entries(i)
    rows = [e for e, _ in es]
    recs = [r for _, r in es if r is not None]
    live = [r for e, r in es if e.state in LIVE and r is not None]
    beats = [_progress(r) for r in recs if _progress(r)]
    left = [e for e in rows if e.state is not RankState.DONE]
    etas = [e.eta_s for e in left]
    newest = max(recs, key=lambda r: r.heartbeat or "", default=None)
    m = dataclasses.replace(
        base, ranks=rows, started_at=i.state.get("started_at") or i.state.get("submitted_at"),
        heartbeat=max(beats) if beats else None, done=sum(e.done for e in rows), total=sum(e.total for e in rows),
        failed=sum(e.failed for e in rows), tokens=sum(r.tokens for r in recs), cut=sum(r.cut for r in recs),
        restarts=sum(r.restarts for r in recs), tokens_per_s=_sum(r.tokens_per_s for r in live),
        rows_per_s=_sum(r.rows_per_s for r in live),
        eta_s=max(etas) if left and all(x is not None for x in etas) else None,
        last_error=_newest(es, "last_error"), last_death=_newest(es, "last_death"),
        disk_path=newest.disk_path if newest else None, disk_free=newest.disk_free if newest else None,
    )  # fmt: skip
    return dataclasses.replace(m, **_phase(i, es, m))


def _phase(i: Inputs, es: list[tuple[RankEntry, RegenerateRecord | None]], m: RegenerateRecord) -> dict:
    rows = [e for e, _ in es]
    live = [(e, r) for e, r in es if e.state in LIVE and r is not None]
    if all(e.state is RankState.DONE for e in rows):
        if i.written:
            return {"phase": "done", "reason": "", "ended_at": m.heartbeat}
        if any(t.state in QUEUED | RUNNING for t in i.tasks.values()):  # the last rank writes it now
            return {"phase": "regenerating", "reason": "every rank is done: the output is being written",
                    "heartbeat": now_iso(i.now)}  # fmt: skip
        last = max((r for _, r in es if r is not None), key=lambda r: r.heartbeat or "", default=None)
        return {
            "phase": "crashed",
            "reason": UNWRITTEN,
            "ended_at": m.heartbeat,
            "pid": last.pid if last else None,
        }
    if live:
        phases = [r.phase for _, r in live]
        phase = next((p for p in ORDER if p in phases), "preflight")
        first = next((r for _, r in live if r.phase == phase), None)
        if first is None:
            return {"phase": phase, "reason": ""}
        return {"phase": phase, "reason": first.reason or "", "pid": first.pid,
                "server_activity": first.server_activity, "server_since": first.server_since}  # fmt: skip
    pending = [e for e in rows if e.state is RankState.PENDING]
    if pending:
        return {
            "phase": "preflight",
            "reason": f"{len(pending)} rank(s) queued in Slurm",
            "heartbeat": now_iso(i.now),
        }
    if i.state.get("stop_requested_at"):
        return {"phase": "stopped", "reason": "stopped on request", "ended_at": i.state["stop_requested_at"]}
    bad = [(e, r) for e, r in es if e.state in ALERTING]
    if bad:
        crashed = all(e.state in (RankState.CRASHED, RankState.LOST) for e, _ in bad)
        why = "; ".join(
            f"rank {e.rank} {describe(e)}" + (f": {e.reason}" if e.reason else "") for e, _ in bad
        )
        pid = next((r.pid for _, r in bad if r is not None), None)  # the episode the watcher alerts on once
        return {
            "phase": "crashed" if crashed else "failed",
            "reason": why[:500],
            "ended_at": m.heartbeat,
            "pid": pid,
        }
    return {"phase": "stopped", "reason": "no rank is queued or running"}


def history(per_rank: list[list[dict]], last: int) -> list[dict]:
    """The ranks' progress points as one series in time order: at each, the rows done and failed
    summed over every rank's latest point, the rates over the ranks whose latest point is at most
    RECENT_S older (a rank that ended no longer adds its rate)."""
    points = []
    for r, ps in enumerate(per_rank):
        for p in ps:
            at = parse_iso(p.get("t")) if isinstance(p.get("t"), str) else None
            if at is not None:
                points.append((at, r, p))
    points.sort(key=lambda x: (x[0], x[1]))
    latest: dict[int, tuple[dt.datetime, dict]] = {}
    out = []
    for at, r, p in points:
        latest[r] = (at, p)
        now = [q for _, q in latest.values()]
        recent = [q for when, q in latest.values() if (at - when).total_seconds() <= RECENT_S]
        out.append({
            "t": p["t"], "done": sum(int(q.get("done") or 0) for q in now),
            "failed": sum(int(q.get("failed") or 0) for q in now),
            "tokens_per_s": _sum(q.get("tokens_per_s") for q in recent),
            "rows_per_s": _sum(q.get("rows_per_s") for q in recent),
        })  # fmt: skip
    return out[-last:]
