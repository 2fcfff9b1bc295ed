"""Rank splitting, the [cluster] config and the ranks in the status record, without a cluster."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from bot.watch.watcher import Limits, Observation, WatchState, decide
from runner.contract.config import from_dict
from runner.contract.errors import ConfigError, StatusError
from runner.contract.ranks import ALERTING, RankEntry, RankState
from runner.contract.status import Phase, StatusRecord
from runner.output.ranks import rank_range, split
from runner.output.store import shard_name
from runner.text.extraction import ranks_line


@pytest.mark.parametrize("total,world", [(6050, 4), (10_001, 3), (300, 8), (4000, 2), (37_312, 32)])
def test_ranges_are_contiguous_and_never_share_a_shard(total, world):
    ranges = split(total, world)
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert len(ranges) == min(world, -(-total // 2000))
    owners = {}
    for r, (lo, hi) in enumerate(ranges):
        assert hi > lo
        for i in (lo, hi - 1):
            assert owners.setdefault(shard_name(i), r) == r


def test_more_ranks_than_shards_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match="at most 1 ranks"):
        rank_range(300, 0, 4)


def test_cluster_config_is_checked():
    assert from_dict({}).cluster.engine == "local"
    with pytest.raises(ConfigError, match="engine"):
        from_dict({"cluster": {"engine": "k8s"}})
    with pytest.raises(ConfigError, match="set by hsx"):
        from_dict({"cluster": {"engine": "slurm", "sbatch_args": ["--array=0-9"]}})
    with pytest.raises(ConfigError, match="unknown key"):
        from_dict({"cluster": {"nodes": 4}})


def test_single_box_record_has_no_ranks_key():
    assert "ranks" not in StatusRecord().to_dict()
    assert StatusRecord.from_dict({**StatusRecord().to_dict(), "ranks": [{"rank": 0}]}).ranks == [
        RankEntry(rank=0)
    ]


# one rank's entry exactly as hsx-runner status --json has always written it
RANK_JSON = {
    "rank": 1, "lo": 2000, "hi": 4000, "state": "node_fail", "job": "17_1", "slurm": "NODE_FAIL",
    "node": "gpu-3", "slurm_reason": "NodeFail", "phase": "extracting", "total": 2000, "done": 812,
    "failed": 2, "rate": None, "eta_s": None, "heartbeat_age_s": 431.5, "reason": None,
    "requeues": 1, "requeued_for": "requeued by Slurm (a node failure or a preemption)",
}  # fmt: skip


def test_rank_entries_keep_the_json_shape():
    d = {**StatusRecord().to_dict(), "ranks": [RANK_JSON]}
    rec = StatusRecord.from_dict(d)
    e = rec.ranks[0]
    assert e.state is RankState.NODE_FAIL and e.rank == 1 and e.node == "gpu-3" and e.done == 812
    out = rec.to_dict()["ranks"][0]
    assert out == RANK_JSON and list(out) == list(RANK_JSON)  # same keys, same order
    assert json.loads(json.dumps(rec.to_dict()))["ranks"][0]["state"] == "node_fail"
    assert StatusRecord.from_dict(rec.to_dict()) == rec


@pytest.mark.parametrize(
    "ranks,match",
    [
        ({"rank": 0}, "not a list"),
        (["running"], "not a list of objects"),
        ([{"rank": 0, "state": "exploded"}], "unknown state 'exploded'"),
        ([{"rank": 0, "done": "12"}], "'done' is not an integer"),
    ],
)
def test_malformed_ranks_are_refused(ranks, match):
    with pytest.raises(StatusError, match=match):
        StatusRecord.from_dict({**StatusRecord().to_dict(), "ranks": ranks})


def test_one_vocabulary_keeps_todays_words():
    assert [s.value for s in RankState] == [
        "pending", "running", "stale", "done", "stopped", "cancelled", "failed",
        "node_fail", "timeout", "preempted", "crashed", "lost", "idle",
    ]  # fmt: skip
    assert {s.value for s in ALERTING} == {
        "failed",
        "node_fail",
        "timeout",
        "preempted",
        "cancelled",
        "crashed",
        "lost",
    }
    assert RankEntry(state="running").state is RankState.RUNNING  # a plain string becomes the enum


def test_the_summary_and_the_watcher_read_typed_ranks():
    now = dt.datetime.now(dt.timezone.utc)
    ok = [RankEntry(rank=r, state=RankState.RUNNING, slurm="RUNNING", node=f"gpu-{r}") for r in (0, 2)]
    bad = RankEntry(rank=1, job="17_1", state=RankState.NODE_FAIL, slurm="NODE_FAIL", node="gpu-3")
    rec = StatusRecord(phase=Phase.EXTRACTING, ranks=[ok[0], bad, ok[1], RankEntry(rank=3, state="pending")])
    assert ranks_line(rec) == "ranks: 2 running, 1 pending, 1 failed — NODE_FAIL on gpu-3 (rank 1)"
    assert ranks_line(StatusRecord(ranks=ok)) == ""  # all running: nothing to say
    stale = RankEntry(rank=4, state=RankState.STALE, slurm="RUNNING")
    assert ranks_line(StatusRecord(ranks=[stale])) == "ranks: 1 failed — STALE (rank 4)"
    acts, _ = decide(WatchState(), Observation(now, rec), Limits())
    alerts = [a for a in acts if a.kind == "alert"]
    assert [a.key for a in alerts] == ["rank:1:17_1:node_fail"]
    assert (
        alerts[0].text.startswith(":rotating_light: Rank 1 NODE_FAIL (node gpu-3) on ") and alerts[0].resume
    )


@pytest.mark.parametrize(
    "arg, owned",
    [
        ("--out=/tmp/x", "--output"),  # a prefix sbatch completes
        ("--outp", "--output"),
        ("--arr=0-3", "--array"),
        ("--job-n=x", "--job-name"),
        ("--parsab", "--parsable"),
        ("--wra=echo", "--wrap"),
        ("-a0-3", "-a"),  # a short option with its value attached
        ("-o/tmp/x", "-o"),
        ("-HJname", "-J"),  # after a flag that takes no value
        ("-vve/tmp/err", "-e"),
    ],
)
def test_sbatch_options_hsx_owns_are_refused_under_any_spelling_sbatch_reads(arg, owned):
    with pytest.raises(ConfigError, match=f"{arg!r}.*{owned}.*set by hsx"):
        from_dict({"cluster": {"engine": "slurm", "sbatch_args": [arg]}})


@pytest.mark.parametrize(
    "arg",
    ["--partition=gpu", "--parti=gpu", "-pgpu-a", "-c4", "--comment=x", "--exclusive", "-H", "--open-mode=append",
     "--account=research", "-Aresearch", "--time-min=10", "gpu-a"],
)  # fmt: skip
def test_sbatch_options_hsx_does_not_own_pass(arg):
    assert from_dict({"cluster": {"engine": "slurm", "sbatch_args": [arg]}}).cluster.sbatch_args == [arg]
