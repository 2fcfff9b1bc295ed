"""Training on Slurm ([cluster] engine = "slurm"): one job of [train] nodes x gpus, through
SpecForge's own launcher.

The job's batch script is the run's supervisor (``runner.train.supervisor``) on the job's first
node, so the run dir (beside the output, on the filesystem the nodes share) keeps its record, log
and lock as on one box. On one node the supervisor starts SpecForge's launcher as a box does
(torchrun over the node's gpus). On several, command.json's argv is ``srun`` starting that launcher
once per node with its node rank, the job's first node as master and a port of the job's own, as
SpecForge's ``deployment.trainer`` asks of each node when nnodes > 1. A queued job holds no lock yet: status
asks Slurm then; stop is scancel (Slurm's SIGTERM reaches the supervisor, which stops the
trainer as ``train stop`` does on a box).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time

from ..contract import timing
from ..contract.atomic import read_object, write_atomic
from ..contract.config import Config
from ..contract.replies import OK, REFUSED, Reply
from ..contract.status import now_iso
from ..job import requeue
from ..train import control, interpreter, record, runspec
from . import slurm_io
from .slurm_merge import QUEUED, RUNNING

JOB = "slurm.json"  # in the run dir: the last submitted job and its sbatch argv
SCRIPT = "slurm-train.sh"
# Each node's task: its node rank, and the job's first node as the master, from Slurm's own
# variables; fixed text, the trainer's argv passed as its arguments.
NODE = (
    'export NODE_RANK="$SLURM_NODEID"; '
    'exec "$@" "deployment.trainer.master_addr=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'
)
# and the job's own master port: torchrun's default, 29500, is whichever other torchrun on the first
# node took it first (its store then fails to listen: EADDRINUSE). Below Linux's ephemeral ports.
PORT = ' "deployment.trainer.master_port=$((20000 + SLURM_JOB_ID % 10000))"'


def node_argv(argv: list[str], nodes: int, own_port: bool = True) -> list[str]:
    """The trainer's argv on ``nodes`` nodes: itself on one; srun's one task per node on several.
    ``own_port``: the job's own master port (False where run.yaml names one)."""
    if nodes == 1:
        return argv
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            "bash", "-c", NODE + (PORT if own_port else ""), "hsx-train-node", *argv]  # fmt: skip


def write_script(cfg: Config, paths: runspec.RunPaths) -> str:
    """The job's supervisor, requeued as an array task is (``slurm_io.REQUEUE``): the trap stops it
    (its trainer ends as at `train stop`, the last complete checkpoint kept) and requeues the job.
    A requeued job starts its script again: first its launch again as `train resume` makes it
    (``requeued``: the last complete checkpoint, the same nodes x gpus), or its refusal past
    the budget."""
    py = cfg.cluster.python or sys.executable
    cmd = [py, "-m", "runner.train.supervisor", paths.root]
    again = [py, "-m", "runner.engines.slurm_train", "requeued", os.path.abspath(cfg.path or "hsx.toml")]
    return slurm_io.requeueing(
        cfg, os.path.join(paths.root, SCRIPT), "the training's supervisor on the job's first node; written by hsx-runner train",
        shlex.join(cmd), "$SLURM_JOB_ID", shlex.quote(requeue.note_path(paths.root, 0)), shlex.join(again),
    )  # fmt: skip


def sbatch_argv(cfg: Config, paths: runspec.RunPaths, script: str) -> list[str]:
    c, t = cfg.cluster, cfg.train
    argv = [
        "sbatch", "--parsable", f"--job-name=hsx-train-{cfg.job.name}", f"--nodes={t.nodes}",
        "--ntasks-per-node=1", f"--output={os.path.join(paths.root, 'slurm-%j.out')}", "--open-mode=append",
        f"--chdir={paths.root}",
    ]  # fmt: skip
    argv += ["--requeue", f"--signal=B:USR1@{c.requeue_signal_s}"] if c.requeue else ["--no-requeue"]
    return argv + slurm_io.site_flags(c, t.gpus) + [script]


def _job(paths: runspec.RunPaths) -> dict:
    try:
        with open(os.path.join(paths.root, JOB)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _live(paths: runspec.RunPaths) -> tuple[str, slurm_io.Task] | None:
    """The run's job while Slurm has it queued or running."""
    job = _job(paths).get("job")
    task = slurm_io.job(job) if job else None
    return (job, task) if task and task.state in QUEUED | RUNNING else None


def submit(cfg: Config, paths: runspec.RunPaths, launch: str) -> Reply:
    """control's launch, as a Slurm job: command.json for the job's nodes, the script, sbatch."""
    with open(paths.command) as f:
        cmd = json.load(f)
    trainer = ((read_object(paths.yaml) or {}).get("deployment") or {}).get("trainer") or {}
    cmd["argv"] = node_argv(cmd["argv"], cfg.train.nodes, own_port="master_port" not in trainer)
    write_atomic(paths.command, json.dumps(cmd, indent=1) + "\n", 0o644)
    argv = sbatch_argv(cfg, paths, write_script(cfg, paths))
    job = slurm_io.sbatch(argv)
    write_atomic(
        os.path.join(paths.root, JOB), json.dumps({"job": job, "submitted_at": now_iso(), "argv": argv})
    )
    text = f"training {control.DID[launch]}: Slurm job {job}, {cfg.train.nodes} node(s) x {cfg.train.gpus}"
    return Reply({"started": True, "job_id": job, "run_dir": paths.root, "argv": argv}, text, OK)


def _refuse_live(cfg: Config) -> Reply | None:
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    if live := _live(paths):
        why = f"the training's Slurm job {live[0]} is {live[1].state.lower()}: stop it first (hsx-runner train stop)"
        return Reply({"started": False, "reason": why, "job_id": live[0]}, why, REFUSED)
    return None


def _extraction(cfg: Config):
    """The extraction's phase as its ranks merged say it (no one file on a cluster says done);
    None for an output extracted on a box (its own record says)."""
    from .slurm import SlurmEngine

    if slurm_io.load_state(cfg.job.out) is None:
        return None
    return lambda: SlurmEngine(cfg).status().phase


def start(cfg: Config) -> Reply:
    return _refuse_live(cfg) or control.start(cfg, submit, _extraction(cfg))


def resume(cfg: Config) -> Reply:
    return _refuse_live(cfg) or control.resume(cfg, submit, _extraction(cfg))


def after_extraction(cfg: Config) -> Reply:
    return control.after_extraction(cfg, _extraction(cfg))


def status(cfg: Config) -> Reply:
    """The run's record, with Slurm's word while its job waits for its supervisor: queued, or
    ended before the supervisor could say anything."""
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    d, unheld = record.judged(paths.root)
    job = _job(paths).get("job")
    if job and unheld == "preflight":  # launched (slurm.json is written under the launch lock)
        d.update(_waiting(job, paths))
    elif job and d["phase"] == "stopped" and requeue.pending(paths.root, 0, d.get("requeues") or 0):
        said = _waiting(job, paths)  # stopped by its own requeue: queued again, not stopped
        d.update(said, reason=f"requeued by its batch script; {said['reason']}")
    return control.status(cfg, d)


def _waiting(job: str, paths: runspec.RunPaths) -> dict:
    try:
        task = slurm_io.job(job)
    except slurm_io.SlurmError as e:  # not known to have ended: still waiting, as far as anyone can say
        return {"phase": "preflight", "reason": f"{e}; asked again at the next status"}
    if task and task.state in QUEUED | RUNNING:
        why = f"Slurm job {job} is {task.state.lower()}" + (f" ({task.reason})" if task.reason else "")
        return {"phase": "preflight", "reason": why}
    state = task.state.lower() if task else "gone"
    log = os.path.join(paths.root, f"slurm-{job}.out")
    return {"reason": f"Slurm job {job} ended ({state}) before its supervisor ran; see {log}"}


def stop(cfg: Config, wait: float) -> Reply:
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    live = _live(paths)
    if not live:
        return Reply({"stopped": False, "reason": "no training job is queued or running"},
                     "no training job is queued or running", REFUSED)  # fmt: skip
    slurm_io.scancel([live[0]])
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _live(paths):
        time.sleep(timing.current().cluster_stop_poll_s)
    gone = _live(paths) is None
    text = f"cancelled Slurm job {live[0]}" + ("" if gone else "; still ending")
    return Reply({"stopped": True, "done": gone, "job_id": live[0]}, text, OK)


def requeued(cfg: Config) -> int:
    """Inside the requeued job, before its supervisor: the launch again as ``train resume`` makes
    it (the last complete checkpoint), handed to this job's script instead of a new job; past
    ``[cluster] max_requeues``, or with nothing to resume, the record says why (crashed: the
    watcher's alert and its Resume button, which submits a new job) and the job ends."""
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    n = requeue.count()
    last = record.Record.load(paths.root).d
    at = last.get("checkpoint_step") or 0  # what a resume starts from
    said = {"requeues": n, "requeued_for": requeue.why(paths.root, 0, n), "requeued_from": at}
    if why := requeue.stop_reason(cfg, n, at, last.get("requeued_from")):
        return _ends(paths, why, said)
    interpreter.resolve_config(cfg)  # "auto": this node's venv, as the CLI resolves it
    reply = control.resume(cfg, lambda cfg, paths, launch: Reply({"started": True}, "requeued", OK))
    if reply.code != OK:
        return _ends(paths, f"requeued, but not resumed: {reply.text}", said)
    rec = record.Record.load(paths.root)
    rec.update(**said)
    rec.write()
    return 0


def _ends(paths: runspec.RunPaths, why: str, said: dict) -> int:
    rec = record.Record.load(paths.root)
    rec.update(phase="crashed", reason=why, ended_at=now_iso(), **said)  # the alert's Resume: a new job
    rec.write()
    print(f"hsx: {why}", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "requeued":
        print("usage: python -m runner.engines.slurm_train requeued CONFIG", file=sys.stderr)
        return 2
    from ..contract.config import load

    return requeued(load(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
