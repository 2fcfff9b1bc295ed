"""The Slurm engine's I/O: the Slurm commands (sbatch, squeue, sacct, scancel), the run's
``cluster.json`` and the ranks' status files. It reads and runs; it decides nothing.

Every Slurm command runs as an argv list on the login node, never through a shell."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

from ..contract.atomic import write_atomic
from ..contract.config import Config
from ..contract.errors import HsxError, StatusError
from ..contract.ranks import STATE_FILE
from ..contract.status import StatusRecord, read_record
from ..job import requeue
from ..output import ranks
from .slurm_merge import Task

SCRIPT = os.path.join(".slurm", "hsx-rank.sh")


class SlurmError(HsxError):
    """A Slurm command could not be run or refused the request."""


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


def read_rank(out: str, r: int) -> StatusRecord | None:
    """Rank r's own record; None when it has none yet or it is unreadable mid-write."""
    try:
        return read_record(ranks.RunPaths(out, r).status)
    except StatusError:
        return None


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


def job(job_id: str) -> Task | None:
    """What Slurm says about one plain (not array) job; None when it no longer knows it.
    SlurmError when neither squeue nor sacct answered: a busy slurmctld's timeout is not a job
    that ended (read as one, a queued training was said to have crashed)."""
    q = _run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%i|%T|%N|%r"])
    for line in q.stdout.splitlines() if q.returncode == 0 else []:
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0] == job_id:
            return Task(parts[1], parts[2], "" if parts[3] == "None" else parts[3])
    answered = q.returncode == 0
    if shutil.which("sacct"):
        p = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,NodeList,Reason"])
        for line in p.stdout.splitlines() if p.returncode == 0 else []:
            parts = line.strip().split("|")
            if len(parts) == 4 and parts[0] == job_id and parts[1]:
                return Task(parts[1].split()[0], parts[2], "" if parts[3] == "None" else parts[3])
        answered = answered or p.returncode == 0
    if not answered:
        said = (q.stderr or q.stdout).strip().splitlines()[-1:] or [f"exit code {q.returncode}"]
        raise SlurmError(f"Slurm did not say where job {job_id} is: squeue: {said[0][:300]}")
    return None


def query_ranks(ids: dict[int, str]) -> dict[int, Task]:
    """rank -> what Slurm says about its 'JOB_TASK'; a rank Slurm no longer knows is absent."""
    info = query(list({t.split("_")[0] for t in ids.values()}))
    return {r: info[t] for r, t in ids.items() if t in info}


# --- submitting and cancelling ---------------------------------------------------------------
def write_script(cfg: Config, world: int) -> str:
    cmd = ["-m", "runner.cli", "run", "--config", os.path.abspath(cfg.path)]
    return array_script(cfg, os.path.join(cfg.job.out, SCRIPT), cmd, world, "start/resume")


# Slurm signals the batch shell (sbatch --signal=B:USR1@[cluster] requeue_signal_s) before the time
# limit, and before a preemption where the cluster sends it. bash runs a trap only between
# commands, so the work runs in the background and the shell waits: the trap stops it (SIGTERM:
# a rank commits what is in flight, the training's supervisor stops its trainer as at `train
# stop`), notes why beside the script and requeues this task or job alone, while [cluster]
# max_requeues allows; past it the work runs on into its time limit and ends as Slurm ends it.
# The work itself refuses to run past the budget (runner/job/requeue.py), whoever requeued it.
# A SIGTERM (scancel, `stop`) is passed on and the shell waits for the work to end: a shell that
# died first would leave the work outside the job, where Slurm's kill after KillWait misses it.
REQUEUE = """#!/bin/bash
# hsx: {what}
n="${{SLURM_RESTART_COUNT:-0}}"
{first}requeue() {{
  [ "$n" -lt {most} ] || return 0
  kill -TERM "$child" 2>/dev/null
  wait "$child"
  echo "$((n + 1)) {why}" > {note}
  echo "hsx: {task} {why}: requeued ($((n + 1)) of {most})" >&2
  scontrol requeue "{task}"
  exit 0
}}
trap requeue USR1
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
{cmd} &
child=$!
while :; do
  wait "$child"
  code=$?
  kill -0 "$child" 2>/dev/null || break
done
exit "$code"
"""


def requeueing(cfg: Config, path: str, what: str, cmd: str, task: str, note: str, first: str = "") -> str:
    """``cmd`` (shell words) as a batch script that requeues its ``task`` (``REQUEUE``); ``note``:
    where its trap says why (shell words), ``first``: what a requeued run does before ``cmd``."""
    most = requeue.budget(cfg)
    if first:
        first = f'if [ "$n" -gt 0 ]; then\n  {first} || exit $?\nfi\n'
    text = REQUEUE.format(
        what=what, first=first, most=most, why=requeue.SIGNALLED, note=note, task=task, cmd=cmd
    )
    write_atomic(path, text, 0o755)
    return path


def array_script(cfg: Config, path: str, cmd: list[str], world: int, verbs: str) -> str:
    """One array task = one rank: ``[cluster] python`` running ``cmd`` with the task's rank,
    requeued by itself before its time limit (``REQUEUE``)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cmd = [cfg.cluster.python or sys.executable, *cmd]
    here = os.path.dirname(os.path.abspath(path))
    return requeueing(
        cfg, path, f"one array task = one rank; written by hsx-runner {verbs}",
        f'{shlex.join(cmd)} --rank "$SLURM_ARRAY_TASK_ID" --world {world}', "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}",
        shlex.quote(os.path.join(here, requeue.NOTE)) + '"$SLURM_ARRAY_TASK_ID"',
    )  # fmt: skip


def sbatch_argv(cfg: Config, todo: list[int], script: str, out: str = "", name: str = "") -> list[str]:
    """The array of ranks ``todo``; ``out``: where its logs/ go (default [job] out), ``name``: the
    job's name (default hsx-[job] name)."""
    c, out = cfg.cluster, out or cfg.job.out
    spec = ",".join(map(str, todo)) + (f"%{c.max_concurrent}" if c.max_concurrent else "")
    argv = [
        "sbatch", "--parsable", f"--job-name={name or f'hsx-{cfg.job.name}'}", f"--array={spec}",
        f"--output={os.path.join(out, 'logs', 'slurm-%A_%a.out')}", "--open-mode=append",
        "--nodes=1", "--ntasks=1", f"--chdir={os.path.dirname(os.path.abspath(cfg.path))}",
    ]  # fmt: skip
    if c.requeue:
        argv += ["--requeue", f"--signal=B:USR1@{c.requeue_signal_s}"]
    return argv + site_flags(c, c.gpus_per_node) + [script]


def site_flags(c, gpus: int) -> list[str]:
    """The site's own sbatch flags ([cluster]), the same for the extraction's array and a
    training job; ``gpus`` per node where [cluster] asks for GPUs at all."""
    asked = (
        (c.partition, f"--partition={c.partition}"),
        (c.gpus_per_node, f"--gpus-per-node={gpus}"),
        (c.time_limit, f"--time={c.time_limit}"),
    )
    return [flag for on, flag in asked if on] + list(c.sbatch_args)


def sbatch(argv: list[str]) -> str:
    """Submit; the array's job id."""
    p = _run(argv, timeout=60)
    if p.returncode != 0:
        raise SlurmError(f"sbatch refused the array (exit {p.returncode}): {p.stderr.strip()[-400:]}")
    return p.stdout.strip().split(";")[0]


def scancel(jobs: list[str]) -> None:
    p = _run(["scancel", *jobs])
    if p.returncode != 0:
        raise SlurmError(f"scancel failed (exit {p.returncode}): {p.stderr.strip()[-400:]}")
