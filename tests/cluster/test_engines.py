"""The engine seam without slurmctld: which engine a config gets, the one reply shape, the exit
codes both sides read, and the Slurm engine's status reading real files with Slurm's answer
stubbed where the I/O module asks it."""

from __future__ import annotations

import json
import os

import pytest

from remote import client
from runner.contract import replies
from runner.contract.config import from_dict
from runner.contract.ranks import RankState
from runner.contract.replies import Reply
from runner.contract.status import Phase, StatusRecord, now_iso, write_record
from runner.engines import engine_for, slurm_io
from runner.engines.local import LocalEngine
from runner.engines.slurm import SlurmEngine
from runner.engines.slurm_merge import Task
from runner.output.store import COMPLETE_DIR, DESCRIPTION, shard_name


def config(tmp_path, engine: str):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"input_ids": [1, 2, 3]}) + "\n" for _ in range(2500)))
    d = {"job": {"name": "t", "model": "m", "dataset": str(data), "out": str(tmp_path / "out")},
         "cluster": {"engine": engine}}  # fmt: skip
    return from_dict(d, base_dir=str(tmp_path))


def test_engine_for_picks_by_the_cluster_section(tmp_path):
    assert type(engine_for(config(tmp_path, "local"))) is LocalEngine
    assert type(engine_for(config(tmp_path, "slurm"))) is SlurmEngine


def test_an_action_reply_always_says_ok_and_message():
    assert Reply({"started": False, "reason": "x"}, "x", 3).payload() == {
        "ok": False, "started": False, "reason": "x", "message": "x",
    }  # fmt: skip
    woken = Reply({"ok": True, "started": False, "woken": True}, "woke").payload()
    assert woken["ok"] is True and woken["message"] == "woke"  # the reply's own ok wins
    assert Reply({"stopped": True}, "gone").payload() == {"ok": True, "stopped": True, "message": "gone"}
    assert Reply({"lines": ["a"]}, "a").payload() == {"lines": ["a"]}  # not an action: as it is


def test_exit_codes_are_one_table():
    assert (replies.OK, replies.NOT_OK, replies.USAGE, replies.REFUSED) == (0, 1, 2, 3)
    assert client.ANSWER_CODES is replies.ANSWER_CODES
    assert replies.ANSWER_CODES["start"] == (0, 3) and replies.ANSWER_CODES["verify"] == (0, 1, 3)
    assert replies.ANSWER_CODES["preflight"] == (0, 1) and replies.ANSWER_CODES["status"] == (0,)
    from runner.contract.kinds import KINDS  # a kind's own, where GpuBox.call reads them

    assert KINDS["train"].codes == (0, 1, 3) and KINDS["measure"].codes == KINDS["extract"].codes == (0, 3)
    assert not set(KINDS) & set(replies.ANSWER_CODES)


def test_slurm_status_before_any_submit_is_stopped_with_the_total(tmp_path):
    rec = engine_for(config(tmp_path, "slurm")).status()
    assert rec.phase is Phase.STOPPED and rec.reason == "not started yet" and rec.ranks == []
    assert rec.total == 2500 and rec.disk.path == str(tmp_path / "out")


def test_slurm_status_reads_state_records_and_slurm_then_merges(tmp_path, monkeypatch):
    cfg = config(tmp_path, "slurm")
    out = cfg.job.out
    os.makedirs(out)
    slurm_io.save_state(
        out, {"ranges": [[0, 2000], [2000, 2500]], "tasks": {"0": {"job": "5"}, "1": {"job": "5"}}}
    )
    write_record(os.path.join(out, "status.rank0.json"),
                 StatusRecord(phase=Phase.EXTRACTING, done=40, rate=2.0, eta_s=980.0, heartbeat_at=now_iso()))  # fmt: skip
    with open(os.path.join(out, "status.rank1.json"), "w") as f:
        f.write("{torn")  # mid-write: read as no record
    asked = []

    def query(ids):
        asked.append(ids)
        return {"5_0": Task("RUNNING", "gpu-1"), "5_1": Task("NODE_FAIL", "gpu-2")}

    monkeypatch.setattr(slurm_io, "query", query)
    rec = engine_for(cfg).status()
    assert asked == [["5"]]
    assert [r.state for r in rec.ranks] == [RankState.RUNNING, RankState.NODE_FAIL]
    assert rec.phase is Phase.EXTRACTING and rec.rate == 2.0 and rec.done == 40 and rec.total == 2500
    assert rec.ranks[0].heartbeat_age_s is not None and rec.ranks[0].heartbeat_age_s < 60
    assert rec.host == "gpu-1" and rec.disk.path == out and rec.disk.free > 0


@pytest.mark.parametrize("server,which,want", [(False, "runner", "runner"), (True, "runner", "server"),
                                               (False, "server", "server")])  # fmt: skip
def test_slurm_logs_of_every_rank(tmp_path, server, which, want):
    # every rank's tail, of the log --which (or --server) names: the ops side asks with --which,
    # and `/extract logs --server` on a cluster once showed the runners' logs
    cfg = config(tmp_path, "slurm")
    out = cfg.job.out
    os.makedirs(os.path.join(out, "logs"))
    slurm_io.save_state(out, {"ranges": [[0, 2000], [2000, 2500]]})
    for r in (0, 1):
        for name in ("runner", "server"):
            with open(os.path.join(out, "logs", f"{name}.rank{r}.log"), "w") as f:
                f.write("".join(f"{name} {r} line {i}\n" for i in range(5)))
    rep = engine_for(cfg).logs(4, which, None, server)
    assert rep.obj["lines"] == [f"[rank {r}] {want} {r} line {i}" for r in (0, 1) for i in (3, 4)]
    assert rep.code == 0 and rep.obj["path"] == os.path.join(out, "logs")
    one = engine_for(cfg).logs(2, which, 1, server).obj["lines"]  # one rank: --which counts
    assert one == [f"{'server' if server or which == 'server' else 'runner'} 1 line {i}" for i in (3, 4)]


def test_a_slurm_resume_of_a_finished_job_is_nothing_to_do_while_its_last_task_ends(tmp_path, monkeypatch):
    """Every sample committed, the last rank's task still COMPLETING in Slurm (its batch script
    ends after the runner): "nothing to do", not "already running" (seen right after "done")."""
    cfg = config(tmp_path, "slurm")
    out = cfg.job.out
    os.makedirs(os.path.join(out, COMPLETE_DIR))
    for shard in {shard_name(0), shard_name(2499)}:  # every shard's marker: the plan lists nothing
        open(os.path.join(out, COMPLETE_DIR, shard), "w").close()
    with open(os.path.join(out, DESCRIPTION), "w") as f:
        json.dump({"total": 2500}, f)
    slurm_io.save_state(out, {"ranges": [[0, 2500]], "tasks": {"0": {"job": "7"}}})
    monkeypatch.setattr(slurm_io, "query", lambda ids: {"7_0": Task("COMPLETING", "gpu-1")})
    monkeypatch.setattr(slurm_io, "sbatch", lambda argv: pytest.fail(f"submitted {argv}"))
    rep = engine_for(cfg).resume()
    assert rep.code == replies.REFUSED and "nothing to do" in rep.payload()["reason"], rep.payload()


def _slurm_bin(tmp_path, squeue: str, sacct: str | None = None) -> str:
    """A PATH whose squeue (and sacct, when given) are these shell bodies, and nothing else of Slurm's."""
    d = tmp_path / "slurm-bin"
    d.mkdir(parents=True)
    for name, body in (("squeue", squeue), ("sacct", sacct)):
        if body is not None:
            (d / name).write_text("#!/bin/sh\n" + body + "\n")
            (d / name).chmod(0o755)
    return f"{d}:/usr/bin:/bin"


def test_a_slurm_that_does_not_answer_is_not_a_job_that_ended(tmp_path, monkeypatch):
    """squeue timing out on a busy slurmctld (and no accounting) says nothing of the job: an error,
    never "gone" (a queued training read so was said to have crashed, under load)."""
    timeout = 'echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1'
    monkeypatch.setenv("PATH", _slurm_bin(tmp_path, timeout))
    with pytest.raises(
        slurm_io.SlurmError, match="did not say where job 7 is: squeue: slurm_load_jobs error"
    ):
        slurm_io.job("7")
    monkeypatch.setenv("PATH", _slurm_bin(tmp_path / "b", "exit 0"))  # answered: it knows no job 7
    assert slurm_io.job("7") is None
    no_accounting = 'echo "Slurm accounting storage is disabled" >&2; exit 1'
    monkeypatch.setenv("PATH", _slurm_bin(tmp_path / "c", timeout, no_accounting))
    with pytest.raises(slurm_io.SlurmError):
        slurm_io.job("7")
    monkeypatch.setenv("PATH", _slurm_bin(tmp_path / "d", timeout, 'echo "7|COMPLETED|n1|None"'))
    assert slurm_io.job("7") == Task("COMPLETED", "n1", "")  # accounting answered for it


def test_a_queued_training_whose_slurm_does_not_answer_stays_waiting(tmp_path, monkeypatch):
    """`train status` while the job waits for its supervisor and Slurm cannot say: still waiting,
    with why; not crashed (the watcher would post a crash and a Resume button)."""
    from runner.engines import slurm_train
    from runner.train import runspec

    cfg = config(tmp_path, "slurm")
    root = tmp_path / "run"
    root.mkdir()
    (root / slurm_train.JOB).write_text(json.dumps({"job": "7"}))
    (root / "status.json").write_text(json.dumps({"phase": "preflight"}))
    monkeypatch.setattr(runspec, "run_dir", lambda cfg: str(root))
    timeout = 'echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1'
    monkeypatch.setenv("PATH", _slurm_bin(tmp_path, timeout))
    d = slurm_train.status(cfg).obj
    assert d["phase"] == "preflight" and "Slurm did not say where job 7 is" in d["reason"], d
    monkeypatch.setenv("PATH", _slurm_bin(tmp_path / "b", "exit 0"))  # Slurm answered: the job is gone
    d = slurm_train.status(cfg).obj
    assert d["phase"] == "crashed" and "Slurm job 7 ended (gone) before its supervisor ran" in d["reason"], d


def test_a_training_being_submitted_is_waiting_not_crashed(tmp_path, monkeypatch):
    """`train status` while a start's sbatch is under way (the record says preflight, no supervisor
    holds the run, slurm.json still names the last launch's ended job): waiting, not crashed.
    A busy slurmctld answers sbatch slowly, and a hand-off's start was said crashed then."""
    from runner.engines import slurm_train
    from runner.train import control, runspec
    from runner.train.record import Record

    cfg = config(tmp_path, "slurm")
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    os.makedirs(paths.root)
    with open(os.path.join(paths.root, slurm_train.JOB), "w") as f:
        json.dump({"job": "6"}, f)  # the last launch's
    with open(paths.command, "w") as f:
        json.dump({"argv": ["/venv/bin/python", "-m", "specforge.cli"], "env": {}}, f)
    Record(paths.root, {"step": 0, "total_steps": 1}).write()
    monkeypatch.setenv("PATH", _slurm_bin(tmp_path, 'echo "6|COMPLETED|n1|None"'))
    seen = []

    def sbatch(argv):
        seen.append(slurm_train.status(cfg).obj)  # asked while the job is being submitted
        return "7"

    monkeypatch.setattr(slurm_io, "sbatch", sbatch)
    assert (
        control.locked(paths.root, lambda: control._launch(cfg, paths, "start", slurm_train.submit)).code == 0
    )
    assert seen[0]["phase"] == "preflight", seen[0]


def test_a_supervisor_taking_its_run_while_status_reads_it_is_not_said_crashed(tmp_path, monkeypatch):
    """The job's supervisor takes the run's lock and writes loading just after `train status`
    looked at the lock: the record it then goes by is the supervisor's, not a crash."""
    from runner.engines import slurm_train
    from runner.output.lock import JobLock
    from runner.train import record, runspec
    from runner.train.record import Record

    cfg = config(tmp_path, "slurm")
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    os.makedirs(paths.root)
    with open(os.path.join(paths.root, slurm_train.JOB), "w") as f:
        json.dump({"job": "7"}, f)
    Record(paths.root, {"phase": "preflight", "step": 0, "total_steps": 1}).write()
    monkeypatch.setenv("PATH", _slurm_bin(tmp_path, 'echo "7|RUNNING|n1|None"'))
    lock, looked = JobLock(paths.lock), record.is_held_at

    def look_then_start(path):
        said = looked(path)
        if path == paths.lock and lock.fd is None:  # the supervisor starts right after the look
            lock.acquire()
            Record(paths.root, {"phase": "loading", "step": 0, "total_steps": 1}).write()
        return said

    monkeypatch.setattr(record, "is_held_at", look_then_start)
    try:
        d = slurm_train.status(cfg).obj
    finally:
        lock.release()
    assert d["phase"] in ("preflight", "loading"), d


def test_a_training_job_requeued_again_from_the_same_checkpoint_stops_for_the_alert(tmp_path, monkeypatch):
    """Inside a training job requeued a second time whose last complete checkpoint is where the first
    requeue resumed from (issue 48: it fails the same way each time): crashed, saying so, within
    its budget; the alert's Resume submits a new job. From a later checkpoint it would resume."""
    from runner.engines import slurm_train
    from runner.job import requeue
    from runner.train import runspec
    from runner.train.record import Record

    cfg = config(tmp_path, "slurm")
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    os.makedirs(paths.root)
    Record(paths.root, {"phase": "training", "step": 6, "checkpoint_step": 4, "requeued_from": 4}).write()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert slurm_train.requeued(cfg) == 1
    d = Record.load(paths.root).d
    assert d["phase"] == "crashed" and "the last two at 4 with nothing done between" in d["reason"], d
    assert d["requeues"] == 2 and d["requeued_from"] == 4
    assert requeue.stalled(2, 6, 4) is None  # a later checkpoint: resumed as before


def test_a_training_stopped_by_its_own_requeue_reads_waiting_not_stopped(tmp_path, monkeypatch):
    """Between its batch script's requeue and the job's next run the trainer is stopped as at
    `train stop`; `train status` says it waits in the queue (issue 48), and a stop of the
    operator's own, with no requeue noted, still reads stopped."""
    from runner.engines import slurm_train
    from runner.job import requeue
    from runner.train import runspec
    from runner.train.record import Record

    cfg = config(tmp_path, "slurm")
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    os.makedirs(paths.root)
    with open(os.path.join(paths.root, slurm_train.JOB), "w") as f:
        json.dump({"job": "7"}, f)
    Record(paths.root, {"phase": "stopped", "reason": "stopped on request", "step": 5, "requeues": 0}).write()
    monkeypatch.setenv("PATH", _slurm_bin(tmp_path, 'echo "7|PENDING||BeginTime"'))
    assert slurm_train.status(cfg).obj["phase"] == "stopped"  # no requeue noted: the operator's stop
    with open(requeue.note_path(paths.root, 0), "w") as f:
        f.write(f"1 {requeue.SIGNALLED}\n")
    d = slurm_train.status(cfg).obj
    assert d["phase"] == "preflight" and d["reason"].startswith(
        "requeued by its batch script; Slurm job 7 is pending"
    ), d
    Record(paths.root, {"phase": "training", "step": 6, "requeues": 1}).write()  # the next run began
    assert not requeue.pending(paths.root, 0, 1)
