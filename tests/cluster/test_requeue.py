"""A Slurm task that loses its node comes back by itself, within a budget (issue 48), on the real
single-node Slurm: the rank's batch shell signalled as before its time limit (what sbatch
--signal sends) stops the rank, requeues its task and the rank resumes where it was; requeued
again past `[cluster] max_requeues` (here by Slurm itself, as after a node failure) the rank ends
failed with the reason, the watcher alerts once, and a resume ends it done: every sample once.
Its cost: ~55 s on the 2-core machine (one test cluster, four starts of one rank's task).

And the same with nothing simulated: a task past its real time limit (two minutes),
signalled by slurmctld itself, requeued by its batch script until the extraction ends
done with no command after `start`. Its cost: ~3 minutes of wall (two runs, the first
signalled ~90 s in, the requeue held ~15 s), little CPU (a paced server answering one request at a
time), beside the other workers."""

from __future__ import annotations

import os
import subprocess

from runner.contract.status import StatusRecord
from runner.data.demo_assets import PACE_ENV
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


def test_a_task_past_its_real_time_limit_is_signalled_requeued_and_ends_done_with_no_command(
    slurm, demo_assets, tmp_path, monkeypatch
):
    """240 answers of at least 0.5 s each, one at a time: 120 s of work, more than the whole
    two-minute limit, so the task cannot end in one run however fast the machine. slurmctld sends
    the signal at its first look at time limits once the end is within requeue_signal_s plus its
    check's period: measured here, a two-minute run was signalled ~90 s in (its next run ended it);
    with a one-minute limit runs got 9-19 s, sometimes less than their server's start, and two such
    runs in a row stopped the task by the rule against failing the same way twice."""
    samples = 240
    monkeypatch.setenv(PACE_ENV, "0.5")  # sbatch hands the submitting environment to the task
    conf = cluster_job(tmp_path / "tl", demo_assets, samples=samples, ranks=1, time_limit="2",
                       requeue_signal_s=10, max_requeues=8, job__concurrency=1)  # fmt: skip
    code, rep = act("start", conf)
    assert code == 0 and "--time=2" in rep["argv"] and "--signal=B:USR1@10" in rep["argv"], rep
    st = wait_for(
        lambda: (s := status(conf))["phase"] in ("done", "failed") and s,
        timeout=900,
        what="the extraction's end",
    )
    rank = st["ranks"][0]
    assert st["phase"] == "done", rank
    assert 1 <= rank["requeues"] <= 8 and rank["requeued_for"] == requeue.SIGNALLED, rank
    found = discovered(out_dir(conf))
    assert sorted(found) == list(range(samples)) and all(len(v) == 1 for v in found.values())
    with open(os.path.join(out_dir(conf), ".slurm", "requeued.0")) as f:
        assert f.read().split(" ", 1)[0] == str(rank["requeues"])  # each requeue the script's own
