"""The Slurm engine ([cluster] engine = "slurm"): the job's ranks as one sbatch array.

hsx does not schedule: it submits ranks, cancels them, and reads their state back. Every
Slurm command runs as an argv list on the login node. A rank's state comes from Slurm
(squeue, which keeps finished tasks for a few minutes; sacct when accounting answers) and
from the rank's own record and heartbeat; ``status`` merges the ranks into the one record."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass

from . import ranks
from .contract.atomic import write_atomic
from .contract.config import Config
from .contract.errors import HsxError, StatusError
from .contract.ranks import ALERTING, LIVE, RankEntry, RankState
from .contract.status import STALE_S, Phase, StatusRecord, age_s, now_iso, read_record
from .dataset import line_offsets
from .store import SHARD, Store, shard_name

STATE_FILE = "cluster.json"  # in the output directory: world, ranges, each rank's Slurm job
SCRIPT = os.path.join(".slurm", "hsx-rank.sh")
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


class SlurmError(HsxError):
    """A Slurm command could not be run or refused the request."""


@dataclass
class Task:
    state: str
    node: str = ""
    reason: str = ""


def _run(argv: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found: is this a Slurm login node?") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {timeout:g}s") from None


# --- the run directory's cluster state ---------------------------------------------------
def load_state(out: str) -> dict | None:
    try:
        with open(os.path.join(out, STATE_FILE)) as f:
            st = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as e:
        raise StatusError(f"{os.path.join(out, STATE_FILE)} is unreadable ({e})") from None
    if not isinstance(st, dict) or not isinstance(st.get("ranges"), list):
        raise StatusError(f"{os.path.join(out, STATE_FILE)} is not a cluster state")
    return st


def save_state(out: str, st: dict) -> None:
    write_atomic(os.path.join(out, STATE_FILE), json.dumps(st, indent=1) + "\n")


def dataset_total(cfg: Config) -> int:
    try:
        return len(line_offsets(cfg.job.dataset)) - 1
    except OSError as e:
        raise HsxError(f"cannot read the dataset {cfg.job.dataset}: {e}") from None


# --- what Slurm says -----------------------------------------------------------------------
def query(job_ids: list[str]) -> dict[str, Task]:
    """'JOB_TASK' -> state for the given array jobs: squeue (pending, running and recently
    finished tasks), then sacct for tasks squeue no longer knows, when accounting answers."""
    ids = sorted({j for j in job_ids if j})
    if not ids:
        return {}
    found: dict[str, Task] = {}
    p = _run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%N|%r"])
    if p.returncode == 0:
        for line in p.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4 and "_" in parts[0]:
                found[parts[0]] = Task(parts[1], parts[2], "" if parts[3] == "None" else parts[3])
    known = {k.split("_")[0] for k in found}
    missing = [j for j in ids if j not in known]
    if missing and shutil.which("sacct"):
        p = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(missing), "-o", "JobID,State,NodeList,Reason"])
        if p.returncode == 0:
            for line in p.stdout.splitlines():
                parts = line.strip().split("|")
                if len(parts) == 4 and "_" in parts[0] and "[" not in parts[0]:
                    state = parts[1].split()[0] if parts[1] else ""  # "CANCELLED by 0"
                    found.setdefault(parts[0], Task(state, parts[2], "" if parts[3] == "None" else parts[3]))
    return found


def _tasks(st: dict, world: int) -> dict[int, str]:
    """rank -> its latest 'JOB_TASK' (the task id is the rank)."""
    out = {}
    for r in range(world):
        job = (st.get("tasks") or {}).get(str(r), {}).get("job")
        if job:
            out[r] = f"{job}_{r}"
    return out


# --- one rank's state ----------------------------------------------------------------------
def _complete(lo: int, hi: int, markers: set[str], rec: StatusRecord | None) -> bool:
    if {shard_name(g) for g in range(lo, hi, SHARD)} <= markers:
        return True
    return rec is not None and rec.phase is Phase.DONE and rec.done + rec.failed >= hi - lo


def rank_state(task: Task | None, rec: StatusRecord | None, complete: bool, stop_requested: bool,
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


def _read_rank(out: str, r: int) -> StatusRecord | None:
    try:
        rec = read_record(ranks.Names(out, r).status)
    except StatusError:
        return None
    rec.heartbeat_age_s = age_s(rec.heartbeat_at)
    return rec


def rank_entries(cfg: Config, st: dict) -> list[tuple[RankEntry, StatusRecord | None]]:
    out = cfg.job.out
    world = len(st["ranges"])
    tasks = _tasks(st, world)
    info = query(list({t.split("_")[0] for t in tasks.values()}))
    markers = Store(out).complete_shards()
    stop = bool(st.get("stop_requested_at"))
    entries = []
    for r, (lo, hi) in enumerate(st["ranges"]):
        rec = _read_rank(out, r)
        task = info.get(tasks.get(r, ""))
        done = _complete(lo, hi, markers, rec)
        state = rank_state(task, rec, done, stop, r in tasks)
        e = RankEntry(
            rank=r, lo=lo, hi=hi, state=state, job=tasks.get(r),
            slurm=task.state if task else None, node=(task.node if task else "") or (rec.host if rec else ""),
            slurm_reason=task.reason if task else "", phase=rec.phase.value if rec else None,
            total=hi - lo, done=rec.done if rec else 0, failed=rec.failed if rec else 0,
            rate=rec.rate if rec and state is RankState.RUNNING else None,
            eta_s=rec.eta_s if rec and state is RankState.RUNNING else None,
            heartbeat_age_s=rec.heartbeat_age_s if rec else None,
            reason=rec.reason if rec else None,
        )  # fmt: skip
        entries.append((e, rec))
    return entries


# --- the merged record ----------------------------------------------------------------------
def merged(cfg: Config) -> StatusRecord:
    out = cfg.job.out
    st = load_state(out)
    if st is None:
        rec = StatusRecord(job=cfg.job.name, phase=Phase.STOPPED, reason="not started yet", ranks=[])
        rec.disk.path = out
        try:
            rec.total = dataset_total(cfg)
        except HsxError:
            pass
        return rec
    entries = rank_entries(cfg, st)
    recs = [r for _, r in entries if r is not None]
    rows = [e for e, _ in entries]
    live = [(e, r) for e, r in entries if e.state in LIVE]
    m = StatusRecord(job=cfg.job.name, ranks=rows, alive=bool(live), started_at=st.get("submitted_at"))
    m.total = sum(e.total for e in rows)
    m.done, m.failed = sum(e.done for e in rows), sum(e.failed for e in rows)
    for k in ("done_this_run", "errors_this_run", "truncated"):
        setattr(m, k, sum(getattr(r, k) for r in recs))
    m.adopted = len(Store(out).adopted())  # one count for the job: ranks share the main manifest
    nodes = sorted({e.node for e, _ in live if e.node})
    m.host = ",".join(nodes)[:80] or socket.gethostname()
    rates = [e.rate for e, _ in live if e.rate is not None]
    m.rate = sum(rates) if rates else None
    tps = [r.tokens_per_s for _, r in live if r is not None and r.tokens_per_s is not None]
    m.tokens_per_s = sum(tps) if tps else None
    left = [e for e in rows if e.state is not RankState.DONE]
    etas = [e.eta_s for e in left]
    m.eta_s = max(etas) if left and all(x is not None for x in etas) else None  # the slowest rank
    if recs:
        m.server.backend = recs[0].server.backend
        m.server.restarts = sum(r.server.restarts for r in recs)
        errs = [(r.heartbeat_at or "", e.rank, r.last_error) for e, r in entries if r and r.last_error]
        if errs:
            _, rank, text = max(errs)
            m.last_error = f"rank {rank}: {text}"[:500]
    _disk(m, out, recs)
    _phase(m, st, entries)
    return m


def _disk(m: StatusRecord, out: str, recs: list[StatusRecord]) -> None:
    m.disk.path = out
    try:
        u = shutil.disk_usage(out)
        m.disk.used, m.disk.free = u.used, u.free
    except OSError:
        pass
    needs = [r.disk.need for r in recs if r.disk.need is not None]
    m.disk.need = sum(needs) if needs else None


def _phase(m: StatusRecord, st: dict, entries: list) -> None:
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
        m.heartbeat_at = max(beats) if beats else now_iso()
        return
    m.heartbeat_at = now_iso() if pending else (max(all_beats) if all_beats else None)
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
    """'CANCELLED on gpu-3': Slurm's word when it has one, else hsx's."""
    word = e.slurm if e.slurm and e.slurm not in RUNNING else e.state.value.upper()
    return f"{word} on {e.node}" if e.node else str(word)


# --- actions -------------------------------------------------------------------------------
def _active(st: dict | None) -> dict[int, Task]:
    if not st:
        return {}
    tasks = _tasks(st, len(st["ranges"]))
    info = query(list({t.split("_")[0] for t in tasks.values()}))
    return {r: info[t] for r, t in tasks.items() if t in info and info[t].state in QUEUED | RUNNING}


def incomplete(cfg: Config, total: int, ranges: list) -> list[int]:
    """Ranks whose range is not fully committed or failed with a reason (a full plan each)."""
    store = Store(cfg.job.out)
    return [r for r, (lo, hi) in enumerate(ranges) if store.plan(total, lo, hi).remaining]


def write_script(cfg: Config, world: int) -> str:
    path = os.path.join(cfg.job.out, SCRIPT)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    py = cfg.cluster.python or sys.executable
    cmd = [py, "-m", "runner.cli", "run", "--config", os.path.abspath(cfg.path)]
    text = (
        "#!/bin/bash\n# hsx: one array task = one rank; written by hsx-runner start/resume\n"
        f'exec {shlex.join(cmd)} --rank "$SLURM_ARRAY_TASK_ID" --world {world}\n'
    )
    write_atomic(path, text)
    return path


def sbatch_argv(cfg: Config, todo: list[int], script: str) -> list[str]:
    c, out = cfg.cluster, cfg.job.out
    spec = ",".join(map(str, todo)) + (f"%{c.max_concurrent}" if c.max_concurrent else "")
    argv = [
        "sbatch", "--parsable", f"--job-name=hsx-{cfg.job.name}", f"--array={spec}",
        f"--output={os.path.join(out, 'logs', 'slurm-%A_%a.out')}", "--open-mode=append",
        "--nodes=1", "--ntasks=1", f"--chdir={os.path.dirname(os.path.abspath(cfg.path))}",
    ]  # fmt: skip
    if c.requeue:
        argv.append("--requeue")
    if c.partition:
        argv.append(f"--partition={c.partition}")
    if c.gpus_per_node:
        argv.append(f"--gpus-per-node={c.gpus_per_node}")
    if c.time_limit:
        argv.append(f"--time={c.time_limit}")
    return argv + list(c.sbatch_args) + [script]


def submit(cfg: Config, resume: bool) -> tuple[bool, dict, str]:
    """Submit every rank that is not complete and not already queued or running."""
    out = cfg.job.out
    if resume and not os.path.exists(os.path.join(out, "dataset.json")):
        return (
            False,
            {"reason": f"nothing to resume in {out}; use start"},
            f"nothing to resume in {out}; use start",
        )
    total = dataset_total(cfg)
    if total == 0:
        return False, {"reason": "the dataset is empty"}, "the dataset is empty"
    st = load_state(out) or {}
    ranges = [tuple(x) for x in st["ranges"]] if st.get("ranges") else ranks.split(total, cfg.cluster.ranks)
    if sum(hi - lo for lo, hi in ranges) != total:
        msg = f"{out} was split for {sum(h - lo for lo, h in ranges)} samples; the dataset has {total}"
        return False, {"reason": msg}, msg
    active = _active(st)
    todo = [r for r in incomplete(cfg, total, ranges) if r not in active]
    if not todo:
        msg = (f"already running: {len(active)} rank(s) queued or running" if active
               else "nothing to do: every rank's samples are committed or failed with a reason")  # fmt: skip
        return False, {"reason": msg, "ranks": sorted(active)}, msg
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    argv = sbatch_argv(cfg, todo, write_script(cfg, len(ranges)))
    p = _run(argv, timeout=60)
    if p.returncode != 0:
        raise SlurmError(f"sbatch refused the array (exit {p.returncode}): {p.stderr.strip()[-400:]}")
    job = p.stdout.strip().split(";")[0]
    now = now_iso()
    st.update(engine="slurm", world=len(ranges), ranges=[list(x) for x in ranges], total=total)
    st.update(submitted_at=now, stop_requested_at=None, last_job=job)
    tasks = st.setdefault("tasks", {})
    for r in todo:
        tasks[str(r)] = {"job": job, "submitted_at": now}
    save_state(out, st)
    text = f"submitted Slurm job {job}: rank(s) {','.join(map(str, todo))} of {len(ranges)}"
    if len(ranges) < cfg.cluster.ranks:
        text += (
            f" (asked for {cfg.cluster.ranks} ranks; {total:,} samples are {len(ranges)} shard(s) of "
            f"{ranks.SHARD}, and a rank never shares a shard)"
        )
    return True, {"job_id": job, "ranks": todo, "world": len(ranges), "argv": argv}, text


def cancel(cfg: Config, wait_s: float) -> tuple[bool, dict, str]:
    import time

    out = cfg.job.out
    st = load_state(out)
    active = _active(st)
    if not active:
        return False, {"reason": "not running"}, "not running"
    st["stop_requested_at"] = now_iso()
    save_state(out, st)
    jobs = sorted({st["tasks"][str(r)]["job"] for r in active})
    p = _run(["scancel", *jobs])
    if p.returncode != 0:
        raise SlurmError(f"scancel failed (exit {p.returncode}): {p.stderr.strip()[-400:]}")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and _active(st):
        time.sleep(0.5)
    gone = not _active(st)
    msg = f"cancelled Slurm job(s) {', '.join(jobs)}" + ("" if gone else "; ranks still draining")
    return gone, {"jobs": jobs, "ranks": sorted(active), "signalled": True}, msg
