"""The Slurm engine's pure half: from what was already read (Slurm's word for each rank's
task, each rank's record, the completed shards, cluster.json, the time) to each rank's state
and the one merged record. No file, process or clock is touched here."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Protocol

from ..contract.ranks import ALERTING, LIVE, RankEntry, RankState
from ..contract.status import STALE_S, Phase, StatusRecord, age_s, now_iso
from ..output.store import SHARD, shard_name

QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED"}
RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"}
BAD = {
    "CANCELLED": RankState.CANCELLED,
    "TIMEOUT": RankState.TIMEOUT,
    "DEADLINE": RankState.TIMEOUT,
    "PREEMPTED": RankState.PREEMPTED,
    "NODE_FAIL": RankState.NODE_FAIL,
    "FAILED": RankState.FAILED,
    "OUT_OF_MEMORY": RankState.FAILED,
    "BOOT_FAIL": RankState.FAILED,
}
PHASE_ORDER = (Phase.EXTRACTING, Phase.PAUSED, Phase.SELF_TEST, Phase.STARTING_SERVER, Phase.PREFLIGHT)


@dataclass
class Task:
    """What Slurm says about one array task."""

    state: str
    node: str = ""
    reason: str = ""


class Seen(Protocol):
    """What a rank's state reads of its record, whichever kind wrote it (the extraction's
    StatusRecord; the regeneration's, seen through ``slurm_regenerate_merge``)."""

    phase: Phase
    heartbeat_age_s: float | None


@dataclass
class Inputs:
    """Everything one merged status needs, read beforehand."""

    job: str  # the job's name
    state: dict  # cluster.json
    tasks: dict[int, Task]  # rank -> Slurm's word for its latest task; absent: Slurm no longer knows it
    records: list[StatusRecord | None]  # per rank, its status file; None: none readable
    markers: set[str]  # the shards whose completion marker is written
    now: dt.datetime
    out: str = ""
    adopted: int = 0  # one count for the job: ranks share the main manifest
    usage: tuple[int, int] | None = None  # (used, free) bytes where out lives; None: unknown
    host: str = ""  # this box, named when no live rank names a node
    ranges: list[tuple[int, int]] = field(init=False)

    def __post_init__(self) -> None:
        self.ranges = [(lo, hi) for lo, hi in self.state["ranges"]]


def task_ids(st: dict) -> dict[int, str]:
    """rank -> its latest 'JOB_TASK' (the task id is the rank)."""
    out = {}
    for r in range(len(st["ranges"])):
        job = (st.get("tasks") or {}).get(str(r), {}).get("job")
        if job:
            out[r] = f"{job}_{r}"
    return out


def complete(lo: int, hi: int, markers: set[str], rec: StatusRecord | None) -> bool:
    if {shard_name(g) for g in range(lo, hi, SHARD)} <= markers:
        return True
    return rec is not None and rec.phase is Phase.DONE and rec.done + rec.failed >= hi - lo


def rank_state(task: Task | None, rec: Seen | None, complete: bool, stop_requested: bool,
               submitted: bool) -> RankState:  # fmt: skip
    slurm = task.state if task else ""
    if slurm in QUEUED:
        return RankState.PENDING
    if complete:
        return RankState.DONE
    fresh = rec is not None and rec.heartbeat_age_s is not None and rec.heartbeat_age_s <= STALE_S
    if slurm in RUNNING:
        if rec is not None and rec.phase.is_active() and not fresh:
            return RankState.STALE
        return RankState.RUNNING
    if slurm in BAD:
        return RankState.STOPPED if stop_requested and slurm == "CANCELLED" else BAD[slurm]
    if rec is None:
        return RankState.LOST if submitted and not slurm else RankState.IDLE
    if rec.phase.is_active():
        return RankState.RUNNING if fresh and not slurm else RankState.CRASHED
    if rec.phase is Phase.STOPPED:
        # stopped by a signal no hsx stop asked for: scancel, a time limit or preemption
        return RankState.STOPPED if stop_requested else RankState.CANCELLED
    return RankState(rec.phase.value)  # failed, crashed, done-but-reopened reads as its phase


def rank_entries(i: Inputs) -> list[tuple[RankEntry, StatusRecord | None]]:
    """Each rank's entry, with its record (its heartbeat's age as of ``i.now``)."""
    ids = task_ids(i.state)
    stop = bool(i.state.get("stop_requested_at"))
    entries = []
    for r, (lo, hi) in enumerate(i.ranges):
        rec = i.records[r] if r < len(i.records) else None
        if rec is not None:
            rec = dataclasses.replace(rec, heartbeat_age_s=age_s(rec.heartbeat_at, i.now))
        task = i.tasks.get(r)
        state = rank_state(task, rec, complete(lo, hi, i.markers, rec), stop, r in ids)
        running = rec is not None and state is RankState.RUNNING
        e = RankEntry(
            rank=r, lo=lo, hi=hi, state=state, job=ids.get(r),
            slurm=task.state if task else None, node=(task.node if task else "") or (rec.host if rec else ""),
            slurm_reason=task.reason if task else "", phase=rec.phase.value if rec else None,
            total=hi - lo, done=rec.done if rec else 0, failed=rec.failed if rec else 0,
            rate=rec.rate if running else None, eta_s=rec.eta_s if running else None,
            heartbeat_age_s=rec.heartbeat_age_s if rec else None, reason=rec.reason if rec else None,
            requeues=rec.requeues if rec else 0, requeued_for=rec.requeued_for if rec else None,
        )  # fmt: skip
        entries.append((e, rec))
    return entries


def merge(i: Inputs) -> StatusRecord:
    """The ranks as one record: counts and rates summed, the slowest rank's ETA, one phase."""
    entries = rank_entries(i)
    recs = [r for _, r in entries if r is not None]
    rows = [e for e, _ in entries]
    live = [(e, r) for e, r in entries if e.state in LIVE]
    m = StatusRecord(job=i.job, ranks=rows, alive=bool(live), started_at=i.state.get("submitted_at"))
    m.total = sum(e.total for e in rows)
    m.done, m.failed = sum(e.done for e in rows), sum(e.failed for e in rows)
    for k in ("done_this_run", "errors_this_run", "truncated"):
        setattr(m, k, sum(getattr(r, k) for r in recs))
    m.adopted = i.adopted
    nodes = sorted({e.node for e, _ in live if e.node})
    m.host = ",".join(nodes)[:80] or i.host
    rates = [e.rate for e, _ in live if e.rate is not None]
    m.rate = sum(rates) if rates else None
    tps = [r.tokens_per_s for _, r in live if r is not None and r.tokens_per_s is not None]
    m.tokens_per_s = sum(tps) if tps else None
    left = [e for e in rows if e.state is not RankState.DONE]
    etas = [e.eta_s for e in left]
    m.eta_s = max(etas) if left and all(x is not None for x in etas) else None  # the slowest rank
    _flow(m, [r for _, r in live if r is not None])
    if recs:
        m.server.backend = recs[0].server.backend
        m.server.restarts = sum(r.server.restarts for r in recs)
        errs = [(r.heartbeat_at or "", e.rank, r.last_error) for e, r in entries if r and r.last_error]
        if errs:
            _, rank, text = max(errs)
            m.last_error = f"rank {rank}: {text}"[:500]
    m.disk.path = i.out
    if i.usage is not None:
        m.disk.used, m.disk.free = i.usage
    needs = [r.disk.need for r in recs if r.disk.need is not None]
    m.disk.need = sum(needs) if needs else None
    _phase(m, i, entries)
    return m


def _flow(m: StatusRecord, live: list[StatusRecord]) -> None:
    """What the watcher's STALLED and `status --detail` read, over the live ranks: the newest
    commit of any, requests in flight summed, the oldest of them, the slowest rank's latency."""
    commits = [r.last_commit_at for r in live if r.last_commit_at]
    m.last_commit_at = max(commits) if commits else None
    m.in_flight = sum(r.in_flight for r in live)
    oldest = [
        (r.oldest_in_flight_s, r.oldest_in_flight_idx) for r in live if r.oldest_in_flight_s is not None
    ]
    if oldest:
        m.oldest_in_flight_s, m.oldest_in_flight_idx = max(oldest, key=lambda x: x[0])
    for k in ("latency_p50_s", "latency_p95_s"):
        got = [getattr(r, k) for r in live if getattr(r, k) is not None]
        setattr(m, k, max(got) if got else None)


def _phase(m: StatusRecord, i: Inputs, entries: list[tuple[RankEntry, StatusRecord | None]]) -> None:
    st = i.state
    rows = [e for e, _ in entries]
    live = [(e, r) for e, r in entries if e.state in LIVE]
    pending = [e for e in rows if e.state is RankState.PENDING]
    bad = [e for e in rows if e.state in ALERTING]
    beats = [r.heartbeat_at for e, r in live if r is not None and r.heartbeat_at]
    all_beats = [r.heartbeat_at for _, r in entries if r is not None and r.heartbeat_at]
    if all(e.state is RankState.DONE for e in rows):
        m.phase = Phase.DONE
        m.phase_since = max(all_beats) if all_beats else None
        m.heartbeat_at = m.phase_since
        return
    if live:
        phases = [r.phase for _, r in live if r is not None and r.phase.is_active()]
        m.phase = next((p for p in PHASE_ORDER if p in phases), Phase.PREFLIGHT)
        first = next((r for _, r in live if r is not None and r.phase is m.phase), None)
        if first is not None:
            m.phase_since, m.reason = first.phase_since, first.reason
            m.server.activity, m.server.started_at = first.server.activity, first.server.started_at
        m.heartbeat_at = max(beats) if beats else now_iso(i.now)
        return
    m.heartbeat_at = now_iso(i.now) if pending else (max(all_beats) if all_beats else None)
    m.phase_since = st.get("submitted_at")
    if pending:
        m.phase, m.reason = Phase.PREFLIGHT, f"{len(pending)} rank(s) queued in Slurm"
    elif st.get("stop_requested_at"):
        m.phase, m.reason, m.phase_since = Phase.STOPPED, "stopped on request", st["stop_requested_at"]
    elif bad:
        m.phase = (
            Phase.CRASHED
            if all(e.state in (RankState.CRASHED, RankState.LOST) for e in bad)
            else Phase.FAILED
        )
        m.reason = "; ".join(f"rank {e.rank} {describe(e)}" for e in bad)[:500]
        m.phase_since = max(all_beats) if all_beats else m.phase_since
    else:
        m.phase, m.reason = Phase.STOPPED, "no rank is queued or running"


def describe(e: RankEntry) -> str:
    """'CANCELLED on gpu-3' (an alerting rank: Slurm no longer says it runs)."""
    return f"{e.word()} on {e.node}" if e.node else e.word()
