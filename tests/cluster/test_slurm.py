"""The Slurm engine against a real single-node Slurm: ranks as an sbatch array, one merged
status, one alert per failed rank, resume of only what failed, stop as scancel; a ckpt.gz job
through a cancel and a SIGKILL, and compact of a finished raw cluster output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

from runner.contract.status import StatusRecord
from runner.output.lock import is_held_at
from runner.procs import cmdline, pids
from runner.text.extraction import render_text
from tests.cluster.conftest import SHARD, Watching, cluster_job, short_rows
from tests.conftest import runner
from tests.runner.helpers import (
    assert_items_equal,
    assert_same_tensors,
    discovered,
    out_dir,
    specforge_items,
    status,
    tensors,
    unrecorded_ckpts,
    verify,
    wait_for,
)

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


def rank_lines(out: str) -> list[dict]:
    """Every line of the ranks' manifests (manifest.rank{R}.jsonl)."""
    lines = []
    for name in sorted(os.listdir(out)):
        if name.startswith("manifest.rank"):
            with open(os.path.join(out, name)) as f:
                lines += [json.loads(x) for x in f]
    return lines


def test_small_job_is_one_rank_and_stop_is_scancel_then_compact(slurm, demo_assets, tmp_path, specforge):
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
    # ended in Slurm, ended on the node: the batch shell waits for its rank, so no runner is left
    # outside the job (once, a shell that died first left it running, its server killed under it)
    assert not [p for p in pids() if conf in cmdline(p)], [cmdline(p) for p in pids() if conf in cmdline(p)]
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
    compact_the_finished_raw_output(conf, specforge)


def compact_the_finished_raw_output(conf: str, specforge) -> None:
    """hsx-runner compact on the finished cluster output (its lines in manifest.rank0.jsonl):
    ckpt.gz in place, verify complete, SpecForge reads each sample once as written, and the
    job's next resume plans nothing, by the shard markers or by listing the files."""
    out = out_dir(conf)
    truth = tensors(conf)
    ranked = rank_lines(out)
    assert len(ranked) >= 300 and not os.path.exists(os.path.join(out, "manifest.jsonl"))
    with open(conf) as f:
        text = f.read()
    with open(conf, "w") as f:  # the operator switches the job to gzip, then compacts
        f.write(text.replace("[job]\n", '[job]\nstorage = "ckpt.gz"\n', 1))
    p = runner("compact", "--json", "--config", conf)
    rep = json.loads(p.stdout)
    assert p.returncode == 0 and rep["complete"] and rep["recoded"] == 300 and rep["freed"] > 0, rep
    found = discovered(out)
    assert sorted(found) == list(range(300)) and all(p.endswith(".ckpt.gz") for (p,) in found.values())
    assert rank_lines(out) == ranked  # the rank's manifest as it was; compact's lines are the job's
    for quick in ((), ("--quick",)):
        code, v = verify(conf, *quick)
        assert code == 0 and v["complete"] and v["ok"] == 300, v
    items = specforge_items(specforge, out)
    assert sorted(items) == list(range(300))
    assert_items_equal(items, truth)
    assert_same_tensors(tensors(conf), truth)
    code, rep = act("resume", conf)
    assert code == 3 and "nothing to do" in rep["reason"], rep
    shutil.rmtree(os.path.join(out, ".complete"))  # no shard marker: the planner lists the .ckpt.gz files
    code, rep = act("resume", conf)
    assert code == 3 and "nothing to do" in rep["reason"], rep
    assert rank_lines(out) == ranked and sorted(discovered(out)) == list(range(300))


def test_ckpt_gz_ranks_one_cancelled_one_killed_resume_only_those(
    slurm, small_shards, demo_assets, tmp_path, specforge
):
    """[job] storage = "ckpt.gz" on four ranks: rank 1 cancelled in Slurm, rank 2's runner
    killed with SIGKILL, both resumed; every sample once under one name, equal to a single-box
    raw run's, as verify and SpecForge's own reader see it."""
    rows = short_rows(ROWS)
    reference = cluster_job(tmp_path / "single", demo_assets, rows=rows, engine="local")
    conf = cluster_job(tmp_path / "array", demo_assets, rows=rows, ranks=4, job__storage="ckpt.gz")
    out = out_dir(conf)
    runner("run", "--config", reference, check=True)  # the single-box run, raw, same data and model
    truth = tensors(reference)

    code, rep = act("start", conf)
    assert code == 0 and rep["ranks"] == [0, 1, 2, 3] and rep["world"] == 4, rep
    job = rep["job_id"]

    def done(r: int) -> int:
        return rank_record(conf, r).get("done", 0)

    # Each rank is hit as soon as it is far enough in: waiting for both first let a rank that
    # started early finish its shard before the kill (seen in CI).
    hit: set[int] = set()

    def strike() -> bool:
        if 1 not in hit and done(1) >= 50:
            # from outside hsx, as an admin or a fault would
            subprocess.run(["scancel", f"{job}_1"], check=True)
            hit.add(1)
        if 2 not in hit and done(2) >= 20:
            held, pid = is_held_at(os.path.join(out, ".lock.rank2"))
            assert held and pid, "rank 2's runner holds its lock"
            os.kill(pid, signal.SIGKILL)  # rank 2's runner dies mid-shard, its commits wherever they were
            hit.add(2)
        return hit == {1, 2}

    wait_for(strike, timeout=120, what="ranks 1 and 2 extracting")

    watching = Watching(conf)
    poll, alerts = watching.poll, watching.alerts

    st = wait_for(
        lambda: (s := poll())["ranks"][1]["state"] == "cancelled" and s, timeout=60, what="cancelled"
    )
    assert st["ranks"][1]["slurm"] == "CANCELLED" and st["ranks"][1]["done"] < SHARD
    # a rank's shards can be marked complete a moment before its runner writes its last count
    settled = lambda s: all(r["state"] != "done" or r["done"] + r["failed"] >= r["total"] for r in s["ranks"])  # noqa: E731
    st = wait_for(
        lambda: (s := poll())["phase"] == "failed" and settled(s) and s, timeout=240, what="the other ranks"
    )
    assert [r["state"] for r in st["ranks"]] == ["done", "cancelled", "failed", "done"], st["ranks"]
    n = [r["done"] for r in st["ranks"]]
    assert n[0] == SHARD and n[3] == ROWS - 3 * SHARD and 0 < n[2] < SHARD and st["total"] == ROWS
    text = render_text(StatusRecord.from_dict(st))
    assert "ranks: 2 done, 2 failed — CANCELLED on localhost (rank 1)" in text, text
    poll()
    said = sorted(a.text.split(" (")[0] for a in alerts)
    assert said == [":rotating_light: Rank 1 CANCELLED", ":rotating_light: Rank 2 FAILED"], said
    assert_items_equal(specforge_items(specforge, out), truth)  # after the kill: each sample at most once

    before = {r: rank_record(conf, r)["started_at"] for r in (0, 3)}
    code, rep = act("resume", conf)
    assert code == 0 and rep["ranks"] == [1, 2], rep
    wait_for(lambda: poll()["phase"] == "done", timeout=180, what="ranks 1 and 2 resumed to the end")
    assert {r: rank_record(conf, r)["started_at"] for r in (0, 3)} == before  # finished ranks untouched
    assert len(alerts) == 2

    found = discovered(out)
    assert sorted(found) == list(range(ROWS)) and all(len(v) == 1 for v in found.values())
    assert all(p.endswith(".ckpt.gz") for (p,) in found.values()) and unrecorded_ckpts(out) == []
    lines = rank_lines(out)
    assert {x.get("storage") for x in lines} == {"ckpt.gz"} and {x["idx"] for x in lines} == set(range(ROWS))
    with open(os.path.join(out, "dataset.json")) as f:
        assert json.load(f)["storage"] == "ckpt.gz"
    for quick in ((), ("--quick",)):
        code, rep = verify(conf, *quick)
        assert code == 0 and rep["complete"] and rep["ok"] == ROWS, rep["reasons"] or rep["missing"]
    assert_same_tensors(truth, tensors(conf))
    items = specforge_items(specforge, out)
    assert sorted(items) == list(range(ROWS))
    assert_items_equal(items, truth)
