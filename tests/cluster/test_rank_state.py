"""A rank's state from what Slurm says and what the rank's record says, without a cluster."""

from __future__ import annotations

from runner.contract.config import from_dict
from runner.contract.status import STALE_S, Phase, StatusRecord
from runner.slurm import Task, merged, rank_state


def rec(phase: Phase, age_s: float | None = 1.0) -> StatusRecord:
    r = StatusRecord(phase=phase)
    r.heartbeat_age_s = age_s
    return r


def test_slurm_s_word_comes_first_then_the_record():
    running, extracting = Task("RUNNING", "node1"), rec(Phase.EXTRACTING)
    assert rank_state(Task("PENDING"), None, False, False, True) == "pending"
    assert rank_state(running, extracting, False, False, True) == "running"
    assert rank_state(running, rec(Phase.EXTRACTING, STALE_S + 1), False, False, True) == "stale"
    assert rank_state(Task("COMPLETED"), rec(Phase.DONE), True, False, True) == "done"
    assert rank_state(Task("NODE_FAIL"), extracting, False, False, True) == "node_fail"
    assert rank_state(Task("TIMEOUT"), extracting, False, False, True) == "timeout"


def test_a_cancel_is_a_stop_only_when_hsx_asked_for_one():
    assert rank_state(Task("CANCELLED"), rec(Phase.STOPPED), False, True, True) == "stopped"
    assert rank_state(Task("CANCELLED"), rec(Phase.STOPPED), False, False, True) == "cancelled"
    # Slurm no longer lists the task: the record decides
    assert rank_state(None, rec(Phase.STOPPED), False, False, True) == "cancelled"
    assert rank_state(None, rec(Phase.STOPPED), False, True, True) == "stopped"


def test_a_rank_gone_from_slurm_and_silent_is_lost_or_crashed():
    assert rank_state(None, None, False, False, True) == "lost"  # submitted, never wrote a record
    assert rank_state(None, None, False, False, False) == "idle"  # never submitted
    assert rank_state(None, rec(Phase.EXTRACTING), False, False, True) == "running"  # fresh heartbeat
    assert rank_state(None, rec(Phase.EXTRACTING, STALE_S + 1), False, False, True) == "crashed"
    assert rank_state(None, rec(Phase.FAILED), False, False, True) == "failed"


def test_a_cluster_job_never_submitted_reads_not_started(tmp_path):
    cfg = from_dict({"job": {"name": "j", "out": str(tmp_path / "out")}, "cluster": {"engine": "slurm"}})
    m = merged(cfg)
    assert m.phase == Phase.STOPPED and m.reason == "not started yet" and m.ranks == [] and m.job == "j"
