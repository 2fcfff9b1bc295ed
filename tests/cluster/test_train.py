"""Training on the Slurm engine (runner/engines/slurm_train.py): one job of [train] nodes x gpus
whose batch script is the run's supervisor. The script, the sbatch argv and each node's task
on several nodes (no Slurm needed); on the test Slurm, a queued job said and cancelled, and a job
whose supervisor runs SpecForge's trainer to the end (one sample, one step); on a two-node test
Slurm, two nodes training one run together (two ranks, two steps)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time

from runner.contract.config import load
from runner.engines import slurm_train
from runner.train import progress, runspec
from tests.cluster.conftest import cluster_job
from tests.conftest import read_config, runner, specforge_train_python, write_config, write_job
from tests.runner.helpers import train_status


def _train_section(python: str, **more) -> dict:
    return {
        "python": python,
        "epochs": 1,
        "save_interval": 1,
        "log_interval": 1,
        "export_at_end": False,
        **more,
    }


def _site(tmp_path, gpus_per_node: int, time_limit: str, nodes: int, gpus: int):
    """A Slurm job's config with a site's partition, GPUs, time limit and own sbatch flag."""
    job = {"name": "big", "model": "m", "dataset": "d.jsonl", "out": "out"}
    cluster = {"engine": "slurm", "partition": "gpu", "gpus_per_node": gpus_per_node, "time_limit": time_limit,
               "sbatch_args": ["--account=lab"]}  # fmt: skip
    train = _train_section("/venv/bin/python", nodes=nodes, gpus=gpus)
    return load(write_config(tmp_path / "hsx.toml", job=job, cluster=cluster, train=train))


def test_the_job_is_nodes_by_gpus_and_each_node_runs_specforges_launcher_with_its_rank(tmp_path):
    cfg = _site(tmp_path, gpus_per_node=8, time_limit="2-00:00:00", nodes=4, gpus=8)
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    os.makedirs(paths.root)
    argv = slurm_train.sbatch_argv(cfg, paths, slurm_train.write_script(cfg, paths))
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-2:] == [
        "--account=lab",
        paths.root + "/slurm-train.sh",
    ]
    for want in ("--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=8", "--partition=gpu",
                 "--time=2-00:00:00", "--requeue", "--signal=B:USR1@120", f"--chdir={paths.root}"):  # fmt: skip
        assert want in argv, (want, argv)
    path = os.path.join(paths.root, "slurm-train.sh")
    script = open(path).read()
    assert subprocess.run(["bash", "-n", path]).returncode == 0, script
    assert f"-m runner.train.supervisor {paths.root} &" in script and "trap requeue USR1" in script
    assert '[ "$n" -lt 3 ] || return 0' in script and "-m runner.engines.slurm_train requeued" in script
    one = ["/venv/bin/python", "-m", "specforge.cli", "train", "-c", paths.yaml]
    assert slurm_train.node_argv(one, 1) == one  # one node: SpecForge's launcher as on a box
    many = slurm_train.node_argv(one, 4)
    assert many[:5] == ["srun", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    # what a node's task runs: its rank and the first node as master, from Slurm's variables
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "scontrol").write_text(
        '#!/bin/sh\n[ "$1 $2 $3" = "show hostnames gpu[07-10]" ] && printf "gpu07\\ngpu08\\n"\n'
    )
    (bin_ / "scontrol").chmod(0o755)
    shown = [
        "python3",
        "-c",
        "import json, os, sys; print(json.dumps([os.environ['NODE_RANK'], *sys.argv[1:]]))",
    ]
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "gpu[07-10]",
           "SLURM_JOB_ID": "123457"}  # fmt: skip

    def task(argv: list[str]) -> list[str]:
        p = subprocess.run(argv[5:-len(one)] + shown + ["training.resume_from=/r/x-step9"], env=env,
                           capture_output=True, text=True, timeout=30)  # fmt: skip
        return json.loads(p.stdout)

    assert task(many) == [
        "2",
        "training.resume_from=/r/x-step9",
        "deployment.trainer.master_addr=gpu07",
        "deployment.trainer.master_port=23457",  # the job's own, not torchrun's 29500 another job may hold
    ]
    # an operator's [train.specforge.deployment.trainer] master_port stands
    assert task(slurm_train.node_argv(one, 4, own_port=False)) == ["2", "training.resume_from=/r/x-step9",
                                                                   "deployment.trainer.master_addr=gpu07"]  # fmt: skip
    assert runspec.spec_for(cfg, paths, {"max_length": 8}, "e", "h")["deployment"]["trainer"] == {
        "nnodes": 4, "nproc_per_node": 8, "master_addr": runspec.MASTER,  # SpecForge refuses 4 nodes without one
    }  # fmt: skip


def test_a_jobs_nodes_take_its_own_master_port_unless_run_yaml_names_one(tmp_path, monkeypatch):
    """submit reads run.yaml: an operator's deployment.trainer.master_port is left to stand."""
    cfg = _site(tmp_path, gpus_per_node=8, time_limit="1:00:00", nodes=2, gpus=8)
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    os.makedirs(paths.root)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "sbatch").write_text("#!/bin/sh\necho 77\n")
    (bin_ / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    for trainer, own in (({"nnodes": 2}, True), ({"nnodes": 2, "master_port": 31000}, False)):
        with open(paths.yaml, "w") as f:
            json.dump({"deployment": {"trainer": trainer}}, f)
        with open(paths.command, "w") as f:
            json.dump({"argv": ["/venv/bin/python", "-m", "specforge.cli"], "env": {}}, f)
        assert slurm_train.submit(cfg, paths, "start").obj["job_id"] == "77"
        node = json.load(open(paths.command))["argv"][7]
        assert ("deployment.trainer.master_port=" in node) is own, node


def _train(conf: str, action: str) -> dict:
    return json.loads(runner("train", action, "--json", "--config", conf).stdout)


def test_a_slurm_extraction_hands_off_to_a_training_job_then_one_is_said_queued_and_cancels(
    slurm, demo_assets, tmp_path
):
    """The extraction's array, its last rank's hand-off (verify, then after_extraction submits the
    training job), SpecForge's trainer under that job's supervisor to the end; then a held job."""
    py = specforge_train_python()
    conf = cluster_job(tmp_path / "t", demo_assets, samples=1)
    sections = read_config(conf)
    write_config(conf, **sections, train=_train_section(py, after_extraction=True, export_at_end=True))
    assert json.loads(runner("start", "--json", "--config", conf).stdout)["started"]
    deadline = time.monotonic() + 300
    while (st := _train(conf, "status"))["phase"] != "done":
        # a string, kept whole: a tuple's repr is cut short, the reason with it
        assert time.monotonic() < deadline and st["phase"] != "crashed", (
            f"training: {json.dumps(st)}\nextraction: {json.dumps(_extraction(conf))}"
        )
        time.sleep(0.5)
    assert st["step"] == st["total_steps"] == st["checkpoint_step"] == 1 and st["export_ok"], st
    ex = _extraction(conf)
    assert ex["phase"] == "done" and ex["handoff"].startswith(
        "training started (after_extraction): training started: Slurm job "
    ), ex
    out = os.path.join(os.path.dirname(conf), "out-train")
    job = json.load(open(os.path.join(out, "slurm.json")))["job"]
    assert f"Slurm job {job}, 1 node(s)" in ex["handoff"]
    assert os.path.exists(os.path.join(out, f"slurm-{job}.out"))  # the batch script's, as sbatch wrote it
    assert (
        "step 1: {" in open(os.path.join(out, "train.log")).read()
    )  # SpecForge's, under the job's supervisor
    held = os.path.join(os.path.dirname(conf), "held.toml")  # a job Slurm holds back an hour
    sections["cluster"]["sbatch_args"] = ["--begin=now+3600"]
    write_config(held, **sections, train=_train_section(py, run_dir="held-train"))
    rep = _train(held, "start")
    assert rep["started"] and "--nodes=1" in rep["argv"], rep
    assert rep["message"] == f"training started: Slurm job {rep['job_id']}, 1 node(s) x 1"
    st = _train(held, "status")
    assert st["phase"] == "preflight" and st["reason"].startswith(f"Slurm job {rep['job_id']} is pending"), st
    again = _train(held, "start")
    assert not again["started"] and f"Slurm job {rep['job_id']} is pending" in again["reason"], again
    assert _train(held, "stop")["done"]
    st = _train(held, "status")
    assert st["phase"] == "crashed" and f"Slurm job {rep['job_id']} ended (cancelled)" in st["reason"], st


def _extraction(conf: str) -> dict:
    return json.loads(runner("status", "--json", "--config", conf).stdout)


def test_the_extractions_array_and_a_training_job_take_the_same_site_flags(tmp_path):
    """[cluster]'s partition, GPUs, time and sbatch_args, from one place for both submissions;
    the array asks for [cluster] gpus_per_node, the training job for [train] gpus."""
    from runner.engines import slurm_io

    cfg = _site(tmp_path, gpus_per_node=2, time_limit="1:00:00", nodes=1, gpus=8)
    site = ["--partition=gpu", "--time=1:00:00", "--account=lab"]
    array = slurm_io.sbatch_argv(cfg, [0, 1], "/s.sh")
    assert all(f in array for f in site) and "--gpus-per-node=2" in array and array[-1] == "/s.sh"
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    train = slurm_train.sbatch_argv(cfg, paths, "/t.sh")
    assert all(f in train for f in site) and "--gpus-per-node=8" in train and train[-1] == "/t.sh"
    assert array.index("--account=lab") > array.index("--partition=gpu")  # the site's own flags last


def test_one_rank_claims_the_hand_off_and_the_merged_status_says_how_it_stands(tmp_path):
    from runner.contract.status import HANDOFF_PENDING
    from runner.engines import slurm_handoff
    from runner.engines.slurm_merge import Task

    out = str(tmp_path)
    running, gone = {0: Task("RUNNING"), 1: Task("COMPLETED")}, {0: Task("COMPLETED")}
    assert slurm_handoff.said(out, running) == HANDOFF_PENDING  # a rank may still claim it
    assert "no rank handed the features to training" in slurm_handoff.said(out, gone)
    assert slurm_handoff._claim(out, 0) and not slurm_handoff._claim(out, 1)  # one claimer only
    assert slurm_handoff.said(out, running) == HANDOFF_PENDING  # rank 0 is at it
    assert "the hand-off by rank 0 did not finish" in slurm_handoff.said(out, gone)
    with open(os.path.join(out, slurm_handoff.FILE), "w") as f:
        json.dump({"rank": 0, "text": "features verified for training"}, f)
    assert slurm_handoff.said(out, gone) == "features verified for training"
    slurm_handoff.clear(out)
    slurm_handoff.clear(out)  # nothing to clear: no error
    assert slurm_handoff._claim(out, 1)


def test_two_slurm_nodes_train_together_to_the_end(slurm_two_nodes, demo_assets, tmp_path):
    """[train] nodes = 2 on a real two-node Slurm (two slurmds on this host): srun starts
    SpecForge's launcher once per node with its node rank, the first node as master and the job's
    own master port (torchrun's default held here), and the two torchruns train one run of two
    ranks (gloo) to the end."""
    py = specforge_train_python()
    conf = write_job(tmp_path / "t", demo_assets, samples=4)
    runner("run", "--config", conf, check=True, timeout=300)  # extracted here, trained on Slurm
    runner("verify", "--config", conf, check=True, timeout=120)
    cluster = {"engine": "slurm", "gpus_per_node": 0}
    write_config(conf, **read_config(conf), cluster=cluster, train=_train_section(py, nodes=2, gpus=1))
    with contextlib.ExitStack() as held:  # torchrun's default master port busy, as on a shared node
        with contextlib.suppress(OSError):  # or busy already
            held.enter_context(socket.create_server(("", 29500)))
        rep = _train(conf, "start")
        assert rep["started"] and "--nodes=2" in rep["argv"], rep
        deadline = time.monotonic() + 150
        while (st := _train(conf, "status"))["phase"] in ("preflight", "loading", "training"):
            assert time.monotonic() < deadline, st
            time.sleep(0.2)
    total = 2  # 4 samples over 2 ranks, one epoch
    assert st["phase"] == "done" and st["world"] == 2, st
    assert st["step"] == st["total_steps"] == st["checkpoint_step"] == total, st
    out = os.path.join(os.path.dirname(conf), "out-train")
    names = set(os.listdir(progress.step_dir(os.path.join(out, "output"), runspec.RUN_ID, total)))
    assert {"training_state.pt", "training_state_rank0.pt", "training_state_rank1.pt"} <= names, names
    # no count of the ranks' step lines in train.log: srun forwards each node's output in 1 KiB
    # messages, so two nodes' long lines can interleave on a busy box; each rank's file is the proof
    job = slurm_train._job(runspec.RunPaths(out))["job"]
    shown = subprocess.run(
        ["scontrol", "show", "job", job], capture_output=True, text=True, check=True
    ).stdout
    assert "NumNodes=2 " in shown and " NodeList=localhost,node2\n" in shown, shown
    for node in slurm_two_nodes.names:  # the trainer's step ran a task on each node
        assert f"StepId={job}.0" in open(os.path.join(slurm_two_nodes.dir, f"slurmd-{node}.log")).read(), node


def test_a_training_job_requeued_by_its_signal_and_by_a_node_failure_trains_to_the_end(
    slurm, demo_assets, tmp_path
):
    """Issue 48 for the training, twice in one run: Slurm's signal before the time limit (USR1 to
    the batch shell, as sbatch --signal sends it) stops the trainer and the job requeues itself;
    later its node is set DOWN under it, and Slurm requeues it itself (NODE_FAIL). Each time the
    requeued job resumes from the last complete checkpoint, the same job, to the end: each step
    logged once in the history the chart draws, the requeues and the last one's cause in the
    record. Its cost: about 75 s (one extraction, SpecForge's trainer launched three times)."""
    from runner.contract.train_history import parse_history
    from runner.job import requeue

    py = specforge_train_python()
    conf = write_job(tmp_path / "t", demo_assets, samples=STEPS)
    runner("run", "--config", conf, check=True, timeout=300)
    runner("verify", "--config", conf, check=True, timeout=120)
    cluster = {"engine": "slurm", "gpus_per_node": 0, "max_requeues": 2}
    write_config(conf, **read_config(conf), cluster=cluster, train=_train_section(py))
    rep = _train(conf, "start")
    assert rep["started"] and "--requeue" in rep["argv"], rep
    deadline = time.monotonic() + 420

    def training(launches: int, ckpt: int) -> dict:
        """The launch's trainer as soon as it is seen past ``ckpt``, held there (SIGSTOP: on the
        busy machine a 40-step launch ended between two polls): what ends this launch is the
        signal or the node under test, never its last steps. In-process polls: a process per poll
        cost more CPU than a step."""
        while True:
            st = train_status(conf)
            if (
                st["phase"] == "training"
                and st["launches"] == launches
                and (st["checkpoint_step"] or 0) >= ckpt
            ):
                os.killpg(st["pid"], signal.SIGSTOP)
                held.append(st["pid"])
                return st
            assert time.monotonic() < deadline and st["phase"] not in ("done", "failed"), st
            time.sleep(0.05)

    held: list[int] = []
    try:
        first = training(1, 2)
        subprocess.run(["scancel", "--signal=USR1", "--batch", rep["job_id"]], check=True)
        again = training(2, first["checkpoint_step"] + 2)  # the first ended by its supervisor's SIGKILL
        assert again["requeues"] == 1 and again["requeued_for"] == requeue.SIGNALLED, again
        node = ["scontrol", "update", "nodename=localhost"]
        subprocess.run([*node, "state=down", "reason=hsx-test"], check=True)  # as a node that fails
        try:
            while slurm_io_state(rep["job_id"]) not in ("PENDING", "REQUEUED"):
                assert time.monotonic() < deadline, slurm_io_state(rep["job_id"])
                time.sleep(0.2)
        finally:  # back (the test cluster's ReturnToService may have brought it back already)
            subprocess.run([*node, "state=resume"], capture_output=True)
    finally:
        for pid in held:  # a trainer still alive (a failed assert) ends as its supervisor ends it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)
    while (st := _train(conf, "status"))["phase"] != "done" or st["launches"] != 3:
        assert time.monotonic() < deadline and st["phase"] not in ("failed",), st
        time.sleep(0.5)
    assert st["step"] == st["total_steps"] == STEPS and st["launch"] == "resume", st
    assert st["requeues"] == 2 and st["requeued_for"] == requeue.BY_SLURM, st
    out = os.path.join(os.path.dirname(conf), "out-train")
    assert slurm_train._job(runspec.RunPaths(out))["job"] == rep["job_id"]  # the same job, requeued
    hist = parse_history(_train(conf, "history"))
    steps = [p["step"] for p in hist["points"]]
    assert steps == sorted(set(steps)) and steps[-1] == STEPS, steps  # no step logged twice
    assert [m["kind"] for m in hist["marks"]].count("resumed") == 2, hist["marks"]


STEPS = 40


def slurm_io_state(job: str) -> str:
    from runner.engines import slurm_io

    task = slurm_io.job(job)
    return task.state if task else ""


def test_a_training_job_requeued_past_its_budget_ends_crashed_saying_so(tmp_path, monkeypatch):
    """Requeued more often than [cluster] max_requeues (Slurm's own requeues count too): the job's
    script runs no supervisor again; the record says why, with the count, as a crash (its alert's
    Resume submits a new job)."""
    from runner.job import requeue
    from runner.train import record

    cfg = _site(tmp_path, gpus_per_node=0, time_limit="", nodes=1, gpus=1)
    root = runspec.run_dir(cfg)
    os.makedirs(root)
    record.Record(root, {"phase": "training", "run_id": "hsx-eagle3", "launches": 2}).write()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "4")
    assert slurm_train.requeued(cfg) == 1
    d = record.read(root)
    assert d["phase"] == "crashed" and d["reason"].startswith(
        "requeued 4 times, past [cluster] max_requeues = 3"
    )
    assert d["requeues"] == 4 and d["requeued_for"] == requeue.BY_SLURM, d
