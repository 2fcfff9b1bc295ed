"""The Slurm engine's pure merge: ranks' states and the one record from inputs read
beforehand, without slurmctld or a file."""

from __future__ import annotations

import datetime as dt

import pytest

from runner.contract.ranks import RankState
from runner.contract.status import Phase, StatusRecord, now_iso
from runner.engines.slurm_merge import Inputs, Task, merge, rank_entries, rank_state, task_ids
from runner.output.store import shard_name
from runner.text.extraction import ranks_line

NOW = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
SUBMITTED = "2026-12-01T10:00:00Z"
RANGES = [[0, 2000], [2000, 4000], [4000, 6050]]


def ago(s: float) -> str:
    return now_iso(NOW - dt.timedelta(seconds=s))


def rec(phase=Phase.EXTRACTING, done=0, beat=5.0, **kw) -> StatusRecord:
    return StatusRecord(phase=phase, done=done, heartbeat_at=ago(beat), **kw)


def inputs(slurm: dict, records: list, markers=(), **st) -> Inputs:
    """Slurm's word per rank, each rank's record, the completed shards; ``st``: cluster.json
    keys over a job of three ranks, all submitted as Slurm job 17."""
    state = {"ranges": RANGES, "tasks": {str(r): {"job": "17"} for r in range(3)}, "submitted_at": SUBMITTED}
    return Inputs(job="j", state={**state, **st}, tasks=slurm, records=records, markers=set(markers),
                  now=NOW, out="/data/out", host="login-1")  # fmt: skip


def shards(lo: int, hi: int) -> set[str]:
    return {shard_name(g) for g in range(lo, hi, 2000)}


DONE_0_2 = shards(0, 2000) | shards(4000, 6050)  # ranks 0 and 2 finished their samples


def test_one_rank_node_fail_fails_the_job_with_its_node():
    recs = [rec(Phase.DONE, 2000), rec(done=812, beat=400), rec(Phase.DONE, 2050)]
    m = merge(inputs({1: Task("NODE_FAIL", "gpu-3", "NodeFail")}, recs, DONE_0_2))
    assert [r.state for r in m.ranks] == [RankState.DONE, RankState.NODE_FAIL, RankState.DONE]
    assert m.phase is Phase.FAILED and m.reason == "rank 1 NODE_FAIL on gpu-3"
    assert m.done == 2000 + 812 + 2050 and m.total == 6050 and not m.alive
    assert m.ranks[1].job == "17_1" and m.ranks[1].slurm_reason == "NodeFail" and m.ranks[1].rate is None
    assert m.phase_since == ago(5.0)  # the newest heartbeat of any rank
    assert ranks_line(m) == "ranks: 2 done, 1 failed — NODE_FAIL on gpu-3 (rank 1)"


def test_a_failed_rank_among_running_ones_keeps_the_job_extracting():
    running = Task("RUNNING", "gpu-1")
    recs = [rec(done=10, rate=1.0), rec(), rec(done=20, rate=2.0)]
    m = merge(inputs({0: running, 1: Task("NODE_FAIL", "gpu-3"), 2: running}, recs))
    assert m.phase is Phase.EXTRACTING and m.alive and m.rate == 3.0
    assert m.ranks[1].state is RankState.NODE_FAIL and m.host == "gpu-1"


def test_all_done_is_done():
    recs = [
        rec(Phase.DONE, 2000, beat=60),
        rec(Phase.DONE, 1990, failed=10, beat=30),
        rec(Phase.DONE, 2050, beat=90),
    ]
    m = merge(inputs({}, recs))  # Slurm has forgotten the tasks; the records say done
    assert [r.state for r in m.ranks] == [RankState.DONE] * 3
    assert m.phase is Phase.DONE and m.phase_since == ago(30) and m.heartbeat_at == ago(30)
    assert (m.done, m.failed, m.total) == (6040, 10, 6050) and m.eta_s is None and m.rate is None
    assert ranks_line(m) == ""


def test_done_by_the_shard_markers_alone():
    m = merge(inputs({}, [None, None, None], shards(0, 6050)))
    assert m.phase is Phase.DONE and all(r.state is RankState.DONE for r in m.ranks)


def test_pending_ranks_read_as_preflight_queued():
    m = merge(inputs({r: Task("PENDING", "", "Resources") for r in range(3)}, [None, None, None]))
    assert [r.state for r in m.ranks] == [RankState.PENDING] * 3
    assert m.phase is Phase.PREFLIGHT and m.reason == "3 rank(s) queued in Slurm"
    assert m.heartbeat_at == now_iso(NOW) and m.phase_since == SUBMITTED
    assert m.ranks[0].slurm_reason == "Resources" and m.host == "login-1"


def test_stop_requested_and_cancelled_is_stopped():
    stopped_at = ago(20)
    tasks = {r: Task("CANCELLED", f"gpu-{r}") for r in range(3)}
    m = merge(inputs(tasks, [rec(Phase.STOPPED, 100)] * 3, stop_requested_at=stopped_at))
    assert [r.state for r in m.ranks] == [RankState.STOPPED] * 3
    assert m.phase is Phase.STOPPED and m.reason == "stopped on request" and m.phase_since == stopped_at


def test_cancelled_without_a_stop_is_a_failure_per_rank():
    tasks = {0: Task("CANCELLED", "gpu-0"), 1: Task("TIMEOUT", ""), 2: Task("PREEMPTED", "gpu-2")}
    m = merge(inputs(tasks, [rec(Phase.STOPPED, 100), rec(), None]))
    assert [r.state for r in m.ranks] == [RankState.CANCELLED, RankState.TIMEOUT, RankState.PREEMPTED]
    assert m.phase is Phase.FAILED
    assert m.reason == "rank 0 CANCELLED on gpu-0; rank 1 TIMEOUT; rank 2 PREEMPTED on gpu-2"


def test_a_stale_heartbeat_while_slurm_says_running_is_stale():
    tasks = {r: Task("RUNNING", f"gpu-{r}") for r in range(3)}
    recs = [
        rec(done=5, rate=1.0, eta_s=50.0),
        rec(done=7, beat=300, rate=9.0, eta_s=9.0),
        rec(done=9, rate=2.0, eta_s=80.0),
    ]
    before = [r.heartbeat_age_s for r in recs]
    m = merge(inputs(tasks, recs))
    assert [r.state for r in m.ranks] == [RankState.RUNNING, RankState.STALE, RankState.RUNNING]
    stale = m.ranks[1]
    assert stale.heartbeat_age_s == 300.0 and stale.rate is None and stale.eta_s is None
    assert m.alive and m.phase is Phase.EXTRACTING and m.rate == 3.0
    assert m.eta_s is None  # a rank with no ETA: no honest ETA for the job
    assert m.host == "gpu-0,gpu-1,gpu-2"
    assert ranks_line(m) == "ranks: 2 running, 1 failed — STALE on gpu-1 (rank 1)"
    assert [r.heartbeat_age_s for r in recs] == before  # the inputs are not changed


def test_rate_is_the_sum_of_live_ranks_and_eta_the_slowest():
    tasks = {0: Task("RUNNING", "gpu-a"), 1: Task("RUNNING", "gpu-b")}
    recs = [
        rec(done=500, rate=2.0, eta_s=750.0, tokens_per_s=100.0, beat=10),
        rec(done=300, rate=3.5, eta_s=486.0, tokens_per_s=150.0),
        rec(Phase.DONE, 2050),
    ]
    m = merge(inputs(tasks, recs, shards(4000, 6050)))
    assert m.rate == 5.5 and m.eta_s == 750.0 and m.tokens_per_s == 250.0
    assert m.phase is Phase.EXTRACTING and m.heartbeat_at == ago(5) and m.done == 2850


def test_the_flow_fields_let_the_watcher_judge_a_stall_on_a_cluster():
    """The newest commit of any live rank, requests in flight summed, the oldest of them, the
    slowest rank's latency: what `status --detail` and the watcher's STALLED read."""
    tasks = {0: Task("RUNNING", "gpu-a"), 1: Task("RUNNING", "gpu-b")}
    recs = [
        rec(done=500, last_commit_at=ago(400), in_flight=8, oldest_in_flight_s=390.0, oldest_in_flight_idx=501,
            latency_p50_s=2.0, latency_p95_s=9.0),
        rec(done=300, last_commit_at=ago(3), in_flight=5, oldest_in_flight_s=4.0, oldest_in_flight_idx=2301,
            latency_p50_s=1.0, latency_p95_s=3.0),
        rec(Phase.DONE, 2050, last_commit_at=ago(1), in_flight=0),
    ]  # fmt: skip
    m = merge(inputs(tasks, recs, shards(4000, 6050)))
    assert m.last_commit_at == ago(3) and m.in_flight == 13
    assert (m.oldest_in_flight_s, m.oldest_in_flight_idx) == (390.0, 501)
    assert (m.latency_p50_s, m.latency_p95_s) == (2.0, 9.0)
    quiet = merge(
        inputs(tasks, [recs[0], rec(done=300, last_commit_at=ago(600)), recs[2]], shards(4000, 6050))
    )
    assert quiet.last_commit_at == ago(400)  # no live rank committed since: a stall the watcher sees


def test_the_phase_of_the_furthest_live_rank_and_its_reason():
    tasks = {r: Task("RUNNING", "n") for r in range(3)}
    recs = [
        rec(Phase.STARTING_SERVER, phase_since=ago(40)),
        rec(Phase.PAUSED, reason="disk low", phase_since=ago(30)),
        rec(Phase.PREFLIGHT),
    ]
    m = merge(inputs(tasks, recs))
    assert m.phase is Phase.PAUSED and m.reason == "disk low" and m.phase_since == ago(30)


def test_sums_disk_errors_and_counts():
    tasks = {r: Task("RUNNING", "n") for r in range(3)}
    recs = [
        rec(done_this_run=4, errors_this_run=1, last_error="old", beat=20),
        rec(last_error="new", beat=2),
        rec(),
    ]
    for r, need in zip(recs, (100, None, 50), strict=True):
        r.disk.need = need
        r.server.restarts = 1
    i = inputs(tasks, recs)
    i.usage, i.adopted = (7, 9), 12
    m = merge(i)
    assert (m.disk.path, m.disk.used, m.disk.free, m.disk.need) == ("/data/out", 7, 9, 150)
    assert m.last_error == "rank 1: new" and m.server.restarts == 3
    assert (m.done_this_run, m.errors_this_run, m.adopted, m.job) == (4, 1, 12, "j")


def test_vanished_ranks_are_lost_and_the_job_crashed():
    m = merge(inputs({}, [None, None, None]))
    assert [r.state for r in m.ranks] == [RankState.LOST] * 3
    assert m.phase is Phase.CRASHED and m.reason == "rank 0 LOST; rank 1 LOST; rank 2 LOST"


def test_never_submitted_ranks_are_idle_and_the_job_stopped():
    m = merge(inputs({}, [None, None, None], tasks={}))
    assert [r.state for r in m.ranks] == [RankState.IDLE] * 3 and m.ranks[0].job is None
    assert m.phase is Phase.STOPPED and m.reason == "no rank is queued or running"


@pytest.mark.parametrize(
    "slurm,phase,beat,stop,submitted,want",
    [
        ("REQUEUED", Phase.EXTRACTING, 5, False, True, RankState.PENDING),
        ("COMPLETING", Phase.EXTRACTING, 5, False, True, RankState.RUNNING),
        ("RUNNING", Phase.STOPPED, 900, False, True, RankState.RUNNING),  # an inactive record is not stale
        ("OUT_OF_MEMORY", Phase.EXTRACTING, 5, False, True, RankState.FAILED),
        ("DEADLINE", None, 0, False, True, RankState.TIMEOUT),
        ("CANCELLED", Phase.STOPPED, 5, True, True, RankState.STOPPED),
        ("", Phase.EXTRACTING, 5, False, True, RankState.RUNNING),  # Slurm forgot it, its heartbeat is fresh
        ("", Phase.EXTRACTING, 500, False, True, RankState.CRASHED),
        ("COMPLETED", Phase.EXTRACTING, 5, False, True, RankState.CRASHED),
        ("", Phase.STOPPED, 5, False, True, RankState.CANCELLED),
        ("", Phase.FAILED, 5, False, True, RankState.FAILED),
        ("", None, 0, False, True, RankState.LOST),
        ("COMPLETED", None, 0, False, True, RankState.IDLE),
    ],
)
def test_rank_state(slurm, phase, beat, stop, submitted, want):
    r = None if phase is None else rec(phase, heartbeat_age_s=float(beat))
    task = Task(slurm) if slurm else None
    assert rank_state(task, r, False, stop, submitted) is want


def test_task_ids_and_entries_from_the_state():
    st = {"ranges": RANGES, "tasks": {"0": {"job": "17"}, "2": {"job": "21"}}}
    assert task_ids(st) == {0: "17_0", 2: "21_2"}
    i = inputs(
        {2: Task("RUNNING", "gpu-9")}, [None, None, rec(done=3, host="h", rate=1.5)], tasks=st["tasks"]
    )
    e = [x for x, _ in rank_entries(i)]
    assert [(x.rank, x.lo, x.hi, x.total, x.job) for x in e] == [
        (0, 0, 2000, 2000, "17_0"), (1, 2000, 4000, 2000, None), (2, 4000, 6050, 2050, "21_2"),
    ]  # fmt: skip
    assert (e[1].state, e[2].state, e[2].node, e[2].slurm, e[2].rate) == (
        RankState.IDLE, RankState.RUNNING, "gpu-9", "RUNNING", 1.5,
    )  # fmt: skip
