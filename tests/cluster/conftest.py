"""A real single-node Slurm for the session, and a two-node one for a test that asks (skipped
where they cannot run, unless HSX_REQUIRE_SLURM=1), and jobs with a [cluster] section."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile

import pytest

from tests.cluster.slurmctl import Cluster, available
from tests.conftest import write_job

SHARD = 200  # rows per shard where a test asks for small_shards (production: 2000)


@contextlib.contextmanager
def _cluster(nodes: int):
    why = available()
    if why:
        if os.environ.get("HSX_REQUIRE_SLURM"):
            pytest.fail(f"a test Slurm cannot start here: {why}")
        pytest.skip(f"no test Slurm: {why}")
    d = tempfile.mkdtemp(prefix="hsx-slurm-")  # under /tmp: munged must reach its socket
    c = Cluster(d, nodes)
    old = os.environ.get("SLURM_CONF")
    try:
        c.start()
        os.environ["SLURM_CONF"] = c.conf  # hsx-runner and the tests' own squeue/scancel
        yield c
    finally:
        c.stop()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm():
    with _cluster(1) as c:
        yield c


@pytest.fixture
def slurm_two_nodes():
    """A second cluster of two nodes (two slurmds on this host), for the one test that needs
    it; SLURM_CONF names it while the test runs."""
    with _cluster(2) as c:
        yield c


@pytest.fixture
def small_shards(monkeypatch):
    """Shards of SHARD rows, so a few hundred rows span several shards and ranks: the runner
    processes read HSX_SHARD_ROWS at start, and this process's store (tensors(), sample_path)
    is given the same size."""
    from runner.output import store

    monkeypatch.setenv(store.SHARD_ENV, str(SHARD))
    monkeypatch.setattr(store, "SHARD", SHARD)


def short_rows(n: int, seed: int = 0) -> list[str]:
    """Pre-tokenized rows of three tokens: enough rows for several shards while extraction
    stays fast on a CPU."""
    rng = random.Random(seed)
    return [json.dumps({"input_ids": [rng.randrange(5, 200) for _ in range(3)], "loss_mask": [0, 1, 1]}) + "\n"
            for _ in range(n)]  # fmt: skip


def cluster_job(dest, assets, rows: list[str] | None = None, samples: int | None = None, **cluster) -> str:
    """write_job plus a [cluster] section (engine = "slurm" unless given); keys named like
    write_job's (job__storage) go to it."""
    extra = {k: cluster.pop(k) for k in list(cluster) if "__" in k}
    if rows is not None:
        extra["rows"] = rows
    cluster = {"engine": "slurm", "gpus_per_node": 0, **cluster}
    return write_job(dest, assets, samples, **extra, **{f"cluster__{k}": v for k, v in cluster.items()})


class Watching:
    """The watcher's judging of a cluster job's merged status, poll after poll, as the bot's
    watcher does it: ``poll()`` reads `hsx-runner status` and keeps the alerts it would post."""

    def __init__(self, conf: str):
        from bot.watch.watcher import Limits, WatchState

        self.conf, self.lim, self.state, self.alerts = conf, Limits(), WatchState(), []

    def poll(self) -> dict:
        import datetime as dt

        from bot.watch.watcher import Observation, decide
        from runner.contract.status import StatusRecord
        from tests.runner.helpers import status

        st = status(self.conf)
        now = dt.datetime.now(dt.timezone.utc)
        acts, self.state = decide(self.state, Observation(now, StatusRecord.from_dict(st)), self.lim)
        self.alerts.extend(a for a in acts if a.kind == "alert")
        return st
