"""The Slurm engine ([cluster] engine = "slurm"): the job's ranks as one sbatch array.

hsx does not schedule: it submits ranks, cancels them, and reads their state back. A rank's
state comes from Slurm (squeue, which keeps finished tasks for a few minutes; sacct when
accounting answers) and from the rank's own record and heartbeat; ``status`` merges the ranks
into the one record. The reading and running is in ``slurm_io``, the merge in ``slurm_merge``."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import socket
import time

from ..contract import timing
from ..contract.errors import HsxError
from ..contract.replies import OK, REFUSED, Reply
from ..contract.status import Phase, StatusRecord, now_iso
from ..data.dataset import line_offsets
from ..job import view
from ..output import ranks
from ..output.store import Store
from . import slurm_handoff, slurm_io
from .base import Engine
from .slurm_merge import QUEUED, RUNNING, Inputs, Task, merge, task_ids


class SlurmEngine(Engine):
    def start(self, force: bool = False) -> Reply:
        return self._submit(False)  # no preflight here: the login node is not where ranks run

    def resume(self, force: bool = False) -> Reply:
        return self._submit(True)

    # --- status --------------------------------------------------------------------------
    def status(self) -> StatusRecord:
        out = self.out
        st = slurm_io.load_state(out)
        if st is None:
            rec = StatusRecord(job=self.cfg.job.name, phase=Phase.STOPPED, reason=view.NOT_STARTED, ranks=[])
            rec.disk.path = out
            try:
                rec.total = self._dataset_total()
            except HsxError:
                pass
            return rec
        tasks = slurm_io.query_ranks(task_ids(st))
        store = Store(out)
        markers = store.complete_shards()
        records = [slurm_io.read_rank(out, r) for r in range(len(st["ranges"]))]
        now = dt.datetime.now(dt.timezone.utc)
        try:
            u = shutil.disk_usage(out)
            usage = (u.used, u.free)
        except OSError:
            usage = None
        inputs = Inputs(
            job=self.cfg.job.name, state=st, tasks=tasks, records=records, markers=markers, now=now,
            out=out, adopted=len(store.adopted()), usage=usage, host=socket.gethostname(),
        )  # fmt: skip
        rec = merge(inputs)
        if rec.phase is Phase.DONE and self.cfg.train.python:
            rec.handoff = slurm_handoff.said(out, tasks)
        return rec

    # --- logs and events: every rank's, each marked with its rank ----------------------------
    def logs(self, n: int, which: str = "runner", rank: int | None = None, server: bool = False) -> Reply:
        if rank is not None:
            return super().logs(n, which, rank, server)
        world = self._world()
        each = max(1, n // max(1, world))
        kinds = ["server"] if server else ["runner", "server", "crash"] if which == "all" else [which]
        lines = []
        for r in range(world):
            paths = ranks.RunPaths(self.out, r)
            logs = {"runner": paths.runner_log, "server": paths.server_log, "crash": paths.crash_log}
            lines += [f"[rank {r}] {x}" for kind in kinds for x in view.tail(logs[kind], each)]
        return Reply({"path": os.path.join(self.out, "logs"), "lines": lines}, "\n".join(lines))

    def event_lines(self, n: int) -> list[str]:
        lines = [x for r in range(self._world()) for x in view.tail(ranks.RunPaths(self.out, r).events, n)]
        return sorted(lines, key=lambda x: x[:30])[-n:]  # the ranks' events in time order

    def _world(self) -> int:
        return len((slurm_io.load_state(self.out) or {"ranges": []})["ranges"])

    # --- actions ------------------------------------------------------------------------------
    def _dataset_total(self) -> int:
        try:
            return len(line_offsets(self.cfg.job.dataset)) - 1
        except OSError as e:
            raise HsxError(f"cannot read the dataset {self.cfg.job.dataset}: {e}") from None

    def _incomplete(self, total: int, ranges: list) -> list[int]:
        """Ranks whose range is not fully committed or failed with a reason (a full plan each)."""
        store = Store(self.out)
        return [r for r, (lo, hi) in enumerate(ranges) if store.plan(total, lo, hi).remaining]

    def _submit(self, resume: bool) -> Reply:
        """Submit every rank that is not complete and not already queued or running."""
        cfg, out = self.cfg, self.out
        if resume and (msg := self.nothing_to_resume()):
            return refused("resume", msg)
        verb = "resume" if resume else "start"
        total = self._dataset_total()
        if total == 0:
            return refused(verb, "the dataset is empty")
        st = slurm_io.load_state(out) or {}
        ranges = (
            [tuple(x) for x in st["ranges"]] if st.get("ranges") else ranks.split(total, cfg.cluster.ranks)
        )
        if sum(hi - lo for lo, hi in ranges) != total:
            return refused(
                verb,
                f"{out} was split for {sum(h - lo for lo, h in ranges)} samples; the dataset has {total}",
            )
        incomplete = self._incomplete(total, ranges)
        if not incomplete:  # even while a finished rank's task still ends in Slurm (COMPLETING)
            return refused(
                verb, "nothing to do: every rank's samples are committed or failed with a reason", ranks=[]
            )
        active = active_ranks(st)
        todo = [r for r in incomplete if r not in active]
        if not todo:
            return refused(
                verb, f"already running: {len(active)} rank(s) queued or running", ranks=sorted(active)
            )
        os.makedirs(os.path.join(out, "logs"), exist_ok=True)
        slurm_handoff.clear(out)
        argv = slurm_io.sbatch_argv(cfg, todo, slurm_io.write_script(cfg, len(ranges)))
        job = slurm_io.sbatch(argv)
        now = now_iso()
        st.update(engine="slurm", world=len(ranges), ranges=[list(x) for x in ranges], total=total)
        st.update(submitted_at=now, stop_requested_at=None, last_job=job)
        tasks = st.setdefault("tasks", {})
        for r in todo:
            tasks[str(r)] = {"job": job, "submitted_at": now}
        slurm_io.save_state(out, st)
        text = f"submitted Slurm job {job}: rank(s) {','.join(map(str, todo))} of {len(ranges)}"
        if len(ranges) < cfg.cluster.ranks:
            text += (
                f" (asked for {cfg.cluster.ranks} ranks; {total:,} samples are {len(ranges)} shard(s) of "
                f"{ranks.SHARD}, and a rank never shares a shard)"
            )
        obj = {
            "started": True,
            "verb": verb,
            "job_id": job,
            "ranks": todo,
            "world": len(ranges),
            "argv": argv,
        }
        return Reply(obj, text, OK)

    def stop(self, wait: float) -> Reply:
        return stop_array(self.out, wait)


def active_ranks(st: dict | None) -> dict[int, Task]:
    """Ranks whose task Slurm has queued or running."""
    if not st:
        return {}
    return {r: t for r, t in slurm_io.query_ranks(task_ids(st)).items() if t.state in QUEUED | RUNNING}


def stop_array(where: str, wait: float) -> Reply:
    """scancel of the ranks queued or running, as ``where``'s cluster.json names them (the
    extraction's output, the regeneration's run dir), the stop noted there first; then up to
    ``wait`` seconds for Slurm to say they ended."""
    st = slurm_io.load_state(where)
    active = active_ranks(st)
    if not active:
        return Reply({"stopped": False, "reason": "not running"}, "not running", REFUSED)
    st["stop_requested_at"] = now_iso()
    slurm_io.save_state(where, st)
    jobs = sorted({st["tasks"][str(r)]["job"] for r in active})
    slurm_io.scancel(jobs)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and active_ranks(st):
        time.sleep(timing.current().cluster_stop_poll_s)
    gone = not active_ranks(st)
    msg = f"cancelled Slurm job(s) {', '.join(jobs)}" + ("" if gone else "; ranks still draining")
    # scancel was sent: the stop is under way even while ranks still drain
    return Reply({"stopped": gone, "jobs": jobs, "ranks": sorted(active), "signalled": True}, msg, OK)


def refused(verb: str, reason: str, **extra) -> Reply:
    return Reply({"started": False, "verb": verb, "reason": reason, **extra}, reason, REFUSED)
