"""Rank splitting and the [cluster] config, without a cluster."""

from __future__ import annotations

import pytest

from runner.contract.config import from_dict
from runner.contract.errors import ConfigError
from runner.contract.status import StatusRecord
from runner.ranks import rank_range, split
from runner.store import shard_name


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
    assert StatusRecord.from_dict({**StatusRecord().to_dict(), "ranks": [{"rank": 0}]}).ranks == [{"rank": 0}]
