"""The regeneration on Slurm ([cluster] engine = "slurm"): its rows dealt evenly to [cluster] ranks
as one sbatch array, each task one rank's supervisor (``python -m runner.regenerate.supervisor
RUN_DIR CONFIG --rank R --world W``) with its own server (port + R) and its own rows.rankR.jsonl
and status.rankR.json in the run dir, on the filesystem every node mounts. ``status`` merges the
ranks (``slurm_regenerate_merge``) with Slurm's word for each; ``stop`` is scancel; ``resume``
submits only the ranks not done. The rank that ends and finds every rank done writes the one
output; should it end before that, ``resume`` writes it."""

from __future__ import annotations

import datetime as dt
import os

from ..contract.atomic import read_jsonl
from ..contract.config import Config
from ..contract.errors import HsxError
from ..contract.ranks import STATE_FILE
from ..contract.regenerate import ROWS, RegenerateRecord
from ..contract.replies import OK, Reply
from ..contract.status import STATUS, now_iso
from ..data.dataset import line_offsets
from ..job import rundir
from ..output import ranks
from ..output.jsonl import rank_file
from ..regenerate import committed, control, record
from ..text.regenerate import line
from . import slurm_io
from .slurm import active_ranks, refused, stop_array
from .slurm_merge import task_ids
from .slurm_regenerate_merge import Inputs, complete, history, merge

SCRIPT = os.path.join(".slurm", "hsx-regenerate-rank.sh")  # in the run dir


def _held(root: str) -> bool:
    """The run dir holds a regeneration already: a cluster state, or a box's record or rows."""
    names = [STATE_FILE, STATUS, ROWS]
    if any(os.path.exists(os.path.join(root, n)) for n in names):
        return True
    return os.path.isdir(root) and any(n.startswith(("rows.rank", "status.rank")) for n in os.listdir(root))


def start(cfg: Config) -> Reply:
    root = control.run_dir(cfg)
    if reply := control.refusal(cfg):
        return reply
    if _held(root):
        return refused(
            "start",
            f"{root} holds a regeneration: resume it (hsx-runner regenerate resume), or move it aside",
        )
    if os.path.exists(control.output(cfg)):
        return refused(
            "start", f"{control.output(cfg)} exists: move it aside, or name another [regenerate] output"
        )
    return _submit(cfg, root, {}, "start")


def resume(cfg: Config) -> Reply:
    root = control.run_dir(cfg)
    if reply := control.refusal(cfg):
        return reply
    st = slurm_io.load_state(root)
    if st is None:
        if os.path.exists(os.path.join(root, STATUS)):
            return refused(
                "resume",
                f'{root} holds a regeneration run on one box: resume it with [cluster] engine = "local"',
            )
        return refused("resume", f"nothing to resume in {root}: start it first (hsx-runner regenerate start)")
    return _submit(cfg, root, st, "resume")


def _submit(cfg: Config, root: str, st: dict, verb: str) -> Reply:
    """Every rank not done and not queued or running, as one array; none left to do but the
    output unwritten: the output, written here."""
    source = control.source(cfg)
    try:
        total = len(line_offsets(source)) - 1
    except OSError as e:
        raise HsxError(f"cannot read the dataset {source}: {e}") from None
    if total == 0:
        return refused(verb, "the dataset is empty")
    ranges = [tuple(x) for x in st["ranges"]] if st.get("ranges") else ranks.even(total, cfg.cluster.ranks)
    if sum(hi - lo for lo, hi in ranges) != total:
        split = sum(hi - lo for lo, hi in ranges)
        return refused(verb, f"{root} was split for {split:,} rows; {source} has {total:,}")
    left = [r for r, (lo, hi) in enumerate(ranges) if not complete(record.of_rank(root, r), lo, hi)]
    active = active_ranks(st)
    if not left:
        return _all_committed(cfg, root, source, total, ranges, active, verb)
    todo = [r for r in left if r not in active]
    if not todo:
        return refused(
            verb, f"already running: {len(active)} rank(s) queued or running", ranks=sorted(active)
        )
    rundir.claim(cfg, "regenerate")
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    cmd = ["-m", "runner.regenerate.supervisor", root, os.path.abspath(cfg.path)]
    script = slurm_io.array_script(
        cfg, os.path.join(root, SCRIPT), cmd, len(ranges), "regenerate start/resume"
    )
    argv = slurm_io.sbatch_argv(cfg, todo, script, root, f"hsx-regenerate-{cfg.job.name}")
    job = slurm_io.sbatch(argv)
    now = now_iso()
    st.update(engine="slurm", world=len(ranges), ranges=[list(x) for x in ranges], total=total, source=source,
              submitted_at=now, stop_requested_at=None, last_job=job)  # fmt: skip
    st.setdefault("started_at", now)  # the run's, kept by each resume (the watcher's milestones are per run)
    for r in todo:
        st.setdefault("tasks", {})[str(r)] = {"job": job, "submitted_at": now}
    slurm_io.save_state(root, st)
    text = f"regeneration: submitted Slurm job {job}, rank(s) {','.join(map(str, todo))} of {len(ranges)}; {root}"
    if len(ranges) < cfg.cluster.ranks:
        text += f" (asked for {cfg.cluster.ranks} ranks; {total:,} rows are at most {len(ranges)})"
    obj = {"started": True, "verb": verb, "job_id": job, "ranks": todo, "world": len(ranges), "argv": argv,
           "run_dir": root}  # fmt: skip
    return Reply(obj, text, OK)


def _all_committed(cfg, root, source, total, ranges, active, verb) -> Reply:
    output = control.output(cfg)
    if os.path.exists(output):
        return refused(verb, f"the regeneration in {root} is done: {output}")
    if active:  # the last rank may be writing it this moment
        return refused(verb, f"every rank is done; {len(active)} still ending in Slurm: ask status again")
    committed.finish_ranks(cfg, root, source, total, ranges)
    text = f"every row was committed, nothing to submit; the output is written now: {output}"
    return Reply({"started": True, "verb": verb, "written": True, "ranks": [], "output": output}, text, OK)


def stop(cfg: Config, wait: float) -> Reply:
    return stop_array(control.run_dir(cfg), wait)


def status(cfg: Config) -> Reply:
    """The ranks merged; not submitted here: the one box's record, or not started."""
    root = control.run_dir(cfg)
    st = slurm_io.load_state(root)
    if st is None:
        return control.status(cfg)
    world = len(st["ranges"])
    inputs = Inputs(
        state=st, tasks=slurm_io.query_ranks(task_ids(st)), records=[record.of_rank(root, r) for r in range(world)],
        written=os.path.exists(control.output(cfg)), now=dt.datetime.now(dt.timezone.utc),
    )  # fmt: skip
    base = RegenerateRecord(run_dir=root, source=st.get("source") or control.source(cfg),
                            output=control.output(cfg), failures=control.failures(cfg))  # fmt: skip
    rec = merge(inputs, base)
    d = rec.to_dict()
    points = [read_jsonl(os.path.join(root, rank_file(control.HISTORY, r)), last=control.HISTORY_POINTS)
              for r in range(world)]  # fmt: skip
    d["history"] = history(points, control.HISTORY_POINTS)
    return Reply(d, line(rec), OK)
