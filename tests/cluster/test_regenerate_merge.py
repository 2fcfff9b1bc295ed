"""The regeneration's Slurm ranks without slurmctld: the rows' even split, and the pure merge of the
ranks' records and Slurm's word into the one record `regenerate status --json` answers."""

from __future__ import annotations

import datetime as dt

import pytest

from runner.contract.config import from_dict
from runner.contract.errors import ConfigError
from runner.contract.ranks import RankState
from runner.contract.regenerate import RegenerateRecord
from runner.contract.status import now_iso
from runner.engines.slurm_merge import Task
from runner.engines.slurm_regenerate_merge import UNWRITTEN, Inputs, history, merge
from runner.output.ranks import even, even_range, own_port
from runner.text.regenerate import line, render_regenerate

NOW = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
RANGES = [[0, 50], [50, 100]]
BASE = RegenerateRecord(output="/data/d.regenerated.jsonl", source="/data/d.jsonl", run_dir="/data/run")


def ago(s: float) -> str:
    return now_iso(NOW - dt.timedelta(seconds=s))


def rec(phase="regenerating", done=0, beat=5.0, **kw) -> RegenerateRecord:
    return RegenerateRecord(phase=phase, done=done, total=50, heartbeat=ago(beat), started_at=ago(900), **kw)


def merged(slurm: dict, records: list, written=False, **st) -> RegenerateRecord:
    """Slurm's word per rank, each rank's record; ``st``: cluster.json keys over two ranks, both
    submitted as Slurm job 9."""
    state = {"ranges": RANGES, "tasks": {"0": {"job": "9"}, "1": {"job": "9"}}, "started_at": ago(1000),
             "submitted_at": ago(600), **st}  # fmt: skip
    return merge(Inputs(state=state, tasks=slurm, records=records, written=written, now=NOW), BASE)


@pytest.mark.parametrize("total,world", [(30, 2), (7, 3), (100, 8), (3, 8), (1, 4), (0, 2), (10_001, 7)])
def test_rows_are_dealt_evenly_contiguously_and_each_to_one_rank(total, world):
    ranges = even(total, world)
    assert len(ranges) == max(1, min(world, total))
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    sizes = [hi - lo for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1 and (total == 0 or min(sizes) >= 1)
    assert [even_range(total, r, len(ranges)) for r in range(len(ranges))] == ranges


def test_a_rank_outside_the_world_or_more_ranks_than_rows_is_refused():
    with pytest.raises(ConfigError, match="at most 3 ranks"):
        even_range(3, 0, 4)
    with pytest.raises(ConfigError, match="outside 0..1"):
        even_range(30, 2, 2)
    with pytest.raises(ConfigError):
        even(30, 0)


def test_each_rank_serves_on_its_own_port():
    cfg = from_dict(
        {"job": {"name": "t", "model": "m", "dataset": "d.jsonl", "out": "o"}, "server": {"port": 30000}}
    )
    assert own_port(cfg, None) is cfg and own_port(cfg, 3).server.port == 30003 and cfg.server.port == 30000


def test_running_ranks_sum_their_rows_and_rates_and_the_slowest_gives_the_eta():
    run = Task("RUNNING", "gpu-1")
    recs = [rec(done=20, failed=1, tokens=800, tokens_per_s=40.0, rows_per_s=1.0, eta_s=30.0, restarts=1, pid=11),
            rec(done=10, tokens=300, tokens_per_s=20.0, rows_per_s=0.5, eta_s=80.0, pid=12)]  # fmt: skip
    m = merged({0: run, 1: run}, recs)
    assert (m.phase, m.done, m.total, m.failed, m.tokens, m.restarts) == ("regenerating", 30, 100, 1, 1100, 1)
    assert (m.tokens_per_s, m.rows_per_s, m.eta_s) == (60.0, 1.5, 80.0)
    assert [r.state for r in m.ranks] == [RankState.RUNNING] * 2 and m.ranks[1].job == "9_1"
    assert m.started_at == ago(1000)  # the run's, kept by every resume
    assert m.heartbeat == ago(5.0) and m.output == BASE.output and m.pid == 11
    assert line(m) == "regenerating · 30/100 rows · 1 not regenerated · 60 tokens/s · ETA ~1m20s"


def test_the_furthest_live_phase_leads_and_its_server_is_said():
    run = Task("RUNNING", "gpu-1")
    loading = rec("starting_server", server_activity="loading weights", server_since=ago(60))
    m = merged({0: run, 1: run}, [rec("preflight"), loading])
    assert m.phase == "starting_server" and m.server_activity == "loading weights"
    m = merged({0: run, 1: run}, [loading, rec(done=3)])
    assert m.phase == "regenerating"


def test_a_rank_killed_mid_way_fails_the_run_once_the_other_is_done():
    recs = [rec("done", done=50, beat=30.0), rec(done=12, beat=200.0, last_error="row 61: too long", pid=77)]
    m = merged({0: Task("COMPLETED", "gpu-1"), 1: Task("FAILED", "gpu-2")}, recs)
    assert [r.state for r in m.ranks] == [RankState.DONE, RankState.FAILED]
    assert m.phase == "failed" and m.reason == "rank 1 FAILED on gpu-2", m.reason
    assert (m.done, m.total) == (62, 100) and m.tokens_per_s is None and m.eta_s is None
    assert m.last_error == "rank 1: row 61: too long" and m.pid == 77 and m.ended_at == ago(30.0)
    text = render_regenerate(m, NOW)
    assert "ranks: 1 done, 1 failed — FAILED on gpu-2 (rank 1)" in text and "/regenerate resume" in text


def test_a_ranks_own_reason_is_said_and_one_slurm_forgot_with_a_stale_record_crashed():
    failed = rec("failed", done=4, reason="ServerError: restart cap 3 spent")
    m = merged({0: Task("RUNNING", "gpu-1"), 1: Task("FAILED", "gpu-2")}, [rec(done=9), failed])
    assert m.phase == "regenerating"  # the live rank goes on; the ranks line says the other
    m = merged({0: Task("COMPLETED"), 1: Task("FAILED", "gpu-2")}, [rec("done", done=50), failed])
    assert m.reason == "rank 1 FAILED on gpu-2: ServerError: restart cap 3 spent"
    m = merged({}, [rec("done", done=50), rec(done=30, beat=600.0, pid=5)])  # squeue and sacct forgot it
    assert m.phase == "crashed" and m.reason == "rank 1 CRASHED" and m.ranks[1].state is RankState.CRASHED


def test_done_only_once_the_output_is_written():
    recs = [rec("done", done=50, beat=20.0), rec("done", done=50, beat=10.0, pid=8)]
    m = merged({}, recs, written=True)
    assert m.phase == "done" and m.done == 100 and m.ended_at == ago(10.0)
    m = merged({0: Task("COMPLETED"), 1: Task("RUNNING", "gpu-2")}, recs)  # the last rank writes it now
    assert m.phase == "regenerating" and "being written" in m.reason and m.heartbeat == now_iso(NOW)
    m = merged({}, recs)  # every rank ended, the output not there: resume writes it
    assert m.phase == "crashed" and m.reason == UNWRITTEN and m.pid == 8


def test_queued_stopped_and_never_submitted():
    m = merged({0: Task("PENDING"), 1: Task("PENDING")}, [None, None])
    assert m.phase == "preflight" and m.reason == "2 rank(s) queued in Slurm" and m.heartbeat == now_iso(NOW)
    m = merged({0: Task("CANCELLED"), 1: Task("CANCELLED")}, [rec("stopped"), rec("stopped")],
               stop_requested_at=ago(50))  # fmt: skip
    assert m.phase == "stopped" and m.reason == "stopped on request" and m.ended_at == ago(50)
    assert [r.state for r in m.ranks] == [RankState.STOPPED] * 2
    m = merged({}, [None, None], tasks={})
    assert m.phase == "stopped" and m.reason == "no rank is queued or running"


def test_the_merged_record_keeps_its_json_shape_with_the_ranks():
    m = merged({0: Task("RUNNING", "gpu-1"), 1: Task("FAILED", "gpu-2")}, [rec(done=3), rec(done=4)])
    d = m.to_dict()
    assert d["ranks"][1]["state"] == "failed" and d["ranks"][1]["slurm"] == "FAILED"
    back = RegenerateRecord.from_dict(d)
    assert back == m and "ranks" not in RegenerateRecord().to_dict()  # one box: no ranks key


def test_the_ranks_history_is_one_series_in_time_order():
    r0 = [{"t": ago(100), "done": 5, "failed": 0, "tokens_per_s": 10.0, "rows_per_s": 0.5},
          {"t": ago(40), "done": 20, "failed": 1, "tokens_per_s": 12.0, "rows_per_s": 0.6}]  # fmt: skip
    r1 = [{"t": ago(90), "done": 3, "failed": 0, "tokens_per_s": 8.0, "rows_per_s": 0.3},
          {"t": ago(5), "done": 30, "failed": 0, "tokens_per_s": 9.0, "rows_per_s": 0.4}, {"t": "torn"}]  # fmt: skip
    h = history([r0, r1], 10)
    assert [p["t"] for p in h] == [ago(100), ago(90), ago(40), ago(5)]
    assert [p["done"] for p in h] == [5, 8, 23, 50] and [p["failed"] for p in h] == [0, 0, 1, 1]
    assert h[1]["tokens_per_s"] == 18.0  # both ranks' latest points are recent
    assert h[3]["tokens_per_s"] == 9.0  # rank 0's last point is 35 s older: its rate no longer counts
    assert history([r0, r1], 2) == h[-2:]


def test_a_ranks_beat_says_it_runs_and_the_stall_clock_is_its_last_commit():
    """A rank writes its record every few seconds (its lock is on another node): a fresh beat is a
    running rank even when Slurm does not answer; the watcher's STALLED reads the last commit."""
    from bot.watch.regenerate_watch import judge
    from bot.watch.watcher import WatchState

    stuck = [rec(done=5, beat=1.0, committed_at=ago(400)), rec(done=7, beat=2.0, committed_at=ago(350))]
    m = merged({}, stuck)  # squeue did not answer: Slurm says nothing of either
    assert [r.state for r in m.ranks] == [RankState.RUNNING] * 2 and m.phase == "regenerating"
    assert m.heartbeat == ago(350)
    said, _ = judge(WatchState(), m, NOW, stall_s=300.0)
    assert [a.text.splitlines()[0] for a in said if "STALLED" in a.text] == [
        ":warning: Regeneration STALLED: no row committed for 5m50s (12 / 100 rows)"
    ]
    moving = [stuck[0], rec(done=8, beat=2.0, committed_at=ago(20))]
    assert merged({}, moving).heartbeat == ago(20)
    assert not [
        a for a in judge(WatchState(), merged({}, moving), NOW, stall_s=300.0)[0] if "STALLED" in a.text
    ]
    loading = [
        stuck[0],
        rec("starting_server", beat=3.0, committed_at=ago(900)),
    ]  # a resumed rank's server loads
    assert merged({}, loading).heartbeat == ago(3.0)
