"""A Slurm task that loses its node comes back by itself, within a budget (issue 48), on the real
single-node Slurm: the rank's batch shell signalled as before its time limit (what sbatch
--signal sends) stops the rank, requeues its task and the rank resumes where it was; requeued
again past `[cluster] max_requeues` (here by Slurm itself, as after a node failure) the rank ends
failed with the reason, the watcher alerts once, and a resume ends it done: every sample once.
Its cost: ~55 s on the 2-core machine (one test cluster, four starts of one rank's task)."""

from __future__ import annotations

import os
import subprocess

from runner.contract.status import StatusRecord
from runner.job import requeue
from runner.text.extraction import render_text
from tests.cluster.conftest import Watching, cluster_job
from tests.cluster.test_slurm import act, rank_record
from tests.runner.helpers import discovered, out_dir, status, verify, wait_for

SAMPLES = 300


def test_a_signalled_task_requeues_itself_and_resumes_then_past_its_budget_alerts_and_resumes(
    slurm, demo_assets, tmp_path
):
    conf = cluster_job(tmp_path / "rq", demo_assets, samples=SAMPLES, ranks=1, max_requeues=1,
                       job__concurrency=1)  # fmt: skip
    out = out_dir(conf)
    code, rep = act("start", conf)
    assert code == 0 and rep["ranks"] == [0], rep
    assert any(a.startswith("--signal=B:USR1@") for a in rep["argv"]) and "--requeue" in rep["argv"]
    task = f"{rep['job_id']}_0"
    first = wait_for(
        lambda: (d := rank_record(conf, 0)).get("done", 0) >= 5 and d, timeout=90, what="extracting"
    )

    # as Slurm does before the time limit: USR1 to the batch shell alone
    subprocess.run(["scancel", "--signal=USR1", "--batch", task], check=True)
    again = wait_for(
        lambda: (d := rank_record(conf, 0)).get("requeues") == 1 and d.get("pid") != first["pid"]
        and d.get("phase") == "extracting" and d,
        timeout=90, what="the task requeued and its rank extracting again",
    )  # fmt: skip
    assert again["requeued_for"] == requeue.SIGNALLED and again["done"] >= first["done"], again
    st = status(conf)
    assert st["ranks"][0]["requeues"] == 1 and st["phase"] == "extracting", st["ranks"]
    assert "requeued: rank 0 once (the last: signalled before its time limit" in render_text(
        StatusRecord.from_dict(st)
    )

    # requeued by Slurm itself, past the budget of one: the rank stops, failed, saying why
    subprocess.run(["scontrol", "requeue", task], check=True)
    watching = Watching(conf)
    poll, alerts = watching.poll, watching.alerts

    st = wait_for(
        lambda: (s := poll())["phase"] == "failed" and s, timeout=90, what="the rank past its budget"
    )
    rank = st["ranks"][0]
    assert rank["requeues"] == 2 and rank["requeued_for"] == requeue.BY_SLURM, rank
    assert "past [cluster] max_requeues = 1" in rank["reason"] and rank["done"] < SAMPLES, rank
    poll()
    assert [a.text.split(" (")[0] for a in alerts] == [":rotating_light: Rank 0 FAILED"], alerts

    code, rep = act("resume", conf)  # what the alert's Resume button runs: a new task, a new budget
    assert code == 0 and rep["ranks"] == [0], rep
    wait_for(lambda: status(conf)["phase"] == "done", timeout=180, what="done")
    found = discovered(out)
    assert sorted(found) == list(range(SAMPLES)) and all(len(v) == 1 for v in found.values())
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == SAMPLES, rep
    with open(os.path.join(out, ".slurm", "requeued.0")) as f:
        assert f.read().split(" ", 1)[0] == "1"  # the shell's note of its own requeue
    assert status(conf)["ranks"][0]["requeues"] == 0  # the new task's own count
