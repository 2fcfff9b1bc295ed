"""The Slurm engine against a real single-node Slurm: ranks as an sbatch array, one merged
status, one alert per failed rank, resume of only what failed, stop as scancel."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess

from bot.watcher import Limits, Observation, WatchState, decide
from runner.contract.render import render_text
from runner.contract.status import StatusRecord
from tests.cluster.conftest import SHARD, cluster_job, short_rows
from tests.conftest import runner
from tests.runner.helpers import assert_same_tensors, status, tensors, verify, wait_for

ROWS = 3 * SHARD + 50  # four shards (the last one short): four ranks with real shards


def act(verb: str, conf: str, *extra) -> tuple[int, dict]:
    p = runner(verb, "--json", "--config", conf, *extra)
    return p.returncode, json.loads(p.stdout)


def rank_record(conf: str, r: int) -> dict:
    try:
        with open(os.path.join(os.path.dirname(conf), "out", f"status.rank{r}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def test_small_job_is_one_rank_and_stop_is_scancel(slurm, demo_assets, tmp_path):
    conf = cluster_job(tmp_path / "small", demo_assets, samples=300, ranks=4, max_concurrent=2)
    code, rep = act("start", conf)
    assert code == 0 and rep["ranks"] == [0] and rep["world"] == 1, rep
    assert "asked for 4 ranks" in rep["message"] and "1 shard(s)" in rep["message"]
    assert "--array=0%2" in rep["argv"]
    wait_for(lambda: rank_record(conf, 0).get("done", 0) >= 5, timeout=90, what="rank 0 extracting")
    code, rep = act("start", conf)
    assert code == 3 and "already running" in rep["reason"]
    code, rep = act("stop", conf, "--wait", "30")
    assert code == 0 and rep["stopped"], rep
    st = status(conf)
    assert st["phase"] == "stopped" and st["ranks"][0]["state"] == "stopped", st
    assert 0 < st["done"] < 300
    assert "ranks:" in render_text(StatusRecord.from_dict(st))  # a stopped rank is worth a line
    code, rep = act("resume", conf)
    assert code == 0 and rep["ranks"] == [0]
    wait_for(lambda: status(conf)["phase"] == "done", timeout=120, what="done")
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 300
    code, rep = act("resume", conf)
    assert code == 3 and "nothing to do" in rep["reason"]


def test_four_ranks_one_cancelled_mid_run_resumes_only_that_rank(slurm, small_shards, demo_assets, tmp_path):
    rows = short_rows(ROWS)
    reference = cluster_job(tmp_path / "single", demo_assets, rows=rows, engine="local")
    conf = cluster_job(tmp_path / "array", demo_assets, rows=rows, ranks=4)
    runner("run", "--config", reference, check=True)  # the single-box run, same data and model

    code, rep = act("start", conf)
    assert code == 0 and rep["ranks"] == [0, 1, 2, 3] and rep["world"] == 4, rep
    job = rep["job_id"]
    wait_for(lambda: rank_record(conf, 1).get("done", 0) >= 50, timeout=120, what="rank 1 extracting")
    subprocess.run(["scancel", f"{job}_1"], check=True)  # from outside hsx, as an admin or a fault would

    lim, state, alerts = Limits(), WatchState(), []

    def poll() -> dict:
        nonlocal state
        st = status(conf)
        acts, state = decide(
            state, Observation(dt.datetime.now(dt.timezone.utc), StatusRecord.from_dict(st)), lim
        )
        alerts.extend(a for a in acts if a.kind == "alert")
        return st

    st = wait_for(
        lambda: (s := poll())["ranks"][1]["state"] == "cancelled" and s, timeout=60, what="cancelled"
    )
    assert st["ranks"][1]["slurm"] == "CANCELLED" and st["ranks"][1]["done"] < SHARD
    st = wait_for(lambda: (s := poll())["phase"] == "failed" and s, timeout=240, what="the other ranks")
    assert [r["state"] for r in st["ranks"]] == ["done", "cancelled", "done", "done"], st["ranks"]
    assert st["done"] == ROWS - (SHARD - st["ranks"][1]["done"]) and st["total"] == ROWS
    text = render_text(StatusRecord.from_dict(st))
    assert "ranks: 3 done, 1 failed — CANCELLED on localhost (rank 1)" in text, text
    poll()
    assert len(alerts) == 1 and "Rank 1 CANCELLED" in alerts[0].text, [a.text for a in alerts]

    before = {r: rank_record(conf, r)["started_at"] for r in (0, 2, 3)}
    code, rep = act("resume", conf)
    assert code == 0 and rep["ranks"] == [1], rep
    wait_for(lambda: poll()["phase"] == "done", timeout=180, what="rank 1 resumed to the end")
    assert {r: rank_record(conf, r)["started_at"] for r in (0, 2, 3)} == before  # finished ranks untouched
    assert len(alerts) == 1
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == ROWS, {k: rep[k] for k in ("missing", "corrupt", "failed")}
    assert_same_tensors(tensors(reference), tensors(conf))
