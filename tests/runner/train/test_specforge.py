"""SpecForge 0.2.0's real trainer under ``hsx-runner train``, on a real extraction's output, in
the CPU lane's venv (``python -m runner.specforge_cpu .cache``; scripts/test.sh builds it).
Skipped when that venv is absent, failed instead when HSX_REQUIRE_SPECFORGE_TRAIN=1.

Small on purpose: 12 samples, 72 steps, a checkpoint every 6."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import pytest

from runner import procs, specforge_cpu
from runner.contract.train import PACE_ENV
from runner.train import progress
from tests.conftest import ROOT, read_config, runner, specforge_train_python, write_config, write_job
from tests.runner.helpers import train_status, until, wait_for

pytestmark = pytest.mark.slow
SAMPLES, EPOCHS, SAVE, LOG = 12, 6, 6, 2
PACE_S = 0.15
TOTAL = SAMPLES * EPOCHS


@pytest.fixture(scope="module")
def train_python():
    py = specforge_train_python()
    return py


@pytest.fixture(scope="module")
def extracted(tmp_path_factory, demo_assets, train_python):
    """A real extraction's output and a config to train on it (each test adds its own run_dir)."""
    path = write_job(tmp_path_factory.mktemp("trainjob"), demo_assets, SAMPLES)
    runner("run", "--config", path, timeout=300, check=True)
    runner("verify", "--config", path, timeout=300, check=True)  # the training preflight's first check
    return path


@pytest.fixture
def paced(monkeypatch):
    """Each optimizer step takes at least PACE_S (the CPU lane's demo pace): a test that kills or
    stops the trainer mid-run finds it mid-run however busy the machine is, where an unpaced
    run's 72 steps take ~10 s and a slow poll could see it end first."""
    monkeypatch.setenv(PACE_ENV, str(PACE_S))


def _config(extracted, run_dir, python, **train) -> str:
    keys = {"python": python, "run_dir": run_dir, "epochs": EPOCHS, "save_interval": SAVE, "log_interval": LOG,
            "learning_rate": 0.001, "export_at_end": False, **train}  # fmt: skip
    path = os.path.join(os.path.dirname(extracted), f"train-{os.path.basename(run_dir)}.toml")
    training = {"ttt_length": 3}
    return write_config(path, **read_config(extracted), train=keys, **{"train.specforge.training": training})


def _train(cfg, action, *args, code=0) -> dict:
    p = runner("train", action, "--json", "--config", cfg, *args, timeout=300)
    assert p.returncode == code, f"train {action} -> {p.returncode}\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout)


def _until(cfg, ok, what, timeout=240) -> dict:
    return until(lambda: train_status(cfg), ok, timeout, 0.2, what)


def _losses(run_dir) -> dict[int, set]:
    """Every logged loss, by step, as the log printed it (each launch's lines)."""
    out: dict[int, set] = {}
    for line in open(os.path.join(run_dir, "train.log"), errors="replace"):
        got = progress.parse_step(line)
        if got:
            out.setdefault(got[0], set()).add(repr(got[1]["loss"]))
    return out


def _alive(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def _snapshot(root) -> dict:
    return {
        os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, fs in os.walk(root)
        for f in fs
        if f != "status.json"
    }


@pytest.fixture(scope="module")
def uninterrupted(extracted, train_python, tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("runs") / "whole")
    cfg = _config(extracted, run_dir, train_python, export_at_end=True)
    assert _train(cfg, "start")["started"]
    st = _until(cfg, lambda s: s["phase"] not in ("preflight", "loading", "training"), "end")
    return cfg, run_dir, st


def test_the_extractions_output_trains_to_the_end_and_is_exported(uninterrupted, extracted):
    cfg, run_dir, st = uninterrupted
    assert st["phase"] == "done", st
    assert (
        st["step"] == st["total_steps"] == TOTAL and st["checkpoint_step"] == TOTAL and st["epoch"] == EPOCHS
    )
    assert isinstance(st["loss"], float) and st["run_dir"] == run_dir and st["python"]
    assert st["export_ok"] and st["export"].startswith(f"exported step {TOTAL} to "), st  # at the end, itself
    assert sorted(_losses(run_dir)) == list(range(LOG, TOTAL + 1, LOG))
    cmd = json.load(open(os.path.join(run_dir, "command.json")))
    assert (
        cmd["argv"][-2:] == ["-c", os.path.join(run_dir, "run.yaml")]
        and cmd["env"]["SPECFORGE_DEVICE"] == "cpu"
    )
    rep = _train(cfg, "export")
    out = os.path.join(run_dir, "export")
    want = json.load(open(os.path.join(os.path.dirname(extracted), "out", "dataset.json")))["aux_layer_ids"]
    got = json.load(open(os.path.join(out, "config.json")))["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"
    ]
    assert rep["ok"] and rep["export_dir"] == out and got == want == rep["aux_layer_ids"]
    flags = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", out]
    assert rep["flags"][2:6] == flags and rep["flags"][:2] == ["--model-path", rep["flags"][1]]
    assert os.path.getsize(os.path.join(out, "model.safetensors")) > 0
    text = runner("train", "export", "--config", cfg).stdout
    assert "--speculative-algorithm EAGLE3 --speculative-draft-model-path" in text


def test_after_extraction_starts_the_training_when_the_extraction_ends_done(
    extracted, train_python, tmp_path, monkeypatch
):
    monkeypatch.delenv("INVOCATION_ID", raising=False)  # a CI runner under systemd: the runner would stay
    run_dir = str(tmp_path / "handed")
    cfg = _config(extracted, run_dir, train_python, after_extraction=True)
    runner("run", "--config", cfg, timeout=300, check=True)  # ends done: every sample is there, verified
    try:
        st = json.loads(runner("status", "--json", "--config", cfg, check=True).stdout)
        assert st["phase"] == "done" and st["handoff"].startswith(
            "training started (after_extraction): training started (trainer pid "
        ), st
        assert f"log {run_dir}/train.log" in st["handoff"]
        rec = _train(cfg, "status")
        assert (
            rec["phase"] in ("preflight", "loading", "training") and rec["launch"] == "start" and rec["pid"]
        )
        assert json.load(open(os.path.join(run_dir, "command.json")))["argv"][0] == train_python
    finally:  # stopped, or (its few steps outran the stop on the busy machine) ended done by itself
        stop = runner("train", "stop", "--json", "--config", cfg, timeout=300)
        said = json.loads(stop.stdout)
        assert (stop.returncode, said.get("done")) == (0, True) or (
            stop.returncode == 3 and _train(cfg, "status")["phase"] == "done"
        ), said


def test_a_second_start_into_the_run_is_refused_and_deletes_nothing(uninterrupted):
    cfg, run_dir, _ = uninterrupted
    before = _snapshot(run_dir)
    rep = _train(cfg, "start", code=3)
    assert not rep["started"] and "holds checkpoints" in rep["reason"] and f"step {TOTAL}" in rep["reason"]
    assert _snapshot(run_dir) == before
    assert _train(cfg, "status")["phase"] == "done"


def test_kills_leave_crashed_records_and_resume_logs_the_uninterrupted_runs_losses(
    uninterrupted, extracted, train_python, tmp_path_factory, paced
):
    run_dir = str(tmp_path_factory.mktemp("runs") / "killed")
    cfg = _config(extracted, run_dir, train_python)
    assert _train(cfg, "start")["started"]
    # kill -9 of the trainer once a checkpoint is durable, before the end
    st = _until(cfg, lambda s: s["checkpoint_step"] is not None, "checkpoint")
    assert st["step"] < TOTAL, "the run ended before the test could kill it"
    os.kill(st["pid"], signal.SIGKILL)
    st = _until(cfg, lambda s: s["phase"] == "crashed", "crashed record")
    assert "killed by signal 9 (SIGKILL)" in st["reason"] and st["checkpoint_step"] >= SAVE
    assert f"checkpoint is step {st['checkpoint_step']}" in st["reason"]
    assert _train(cfg, "start", code=3)["reason"].count("holds checkpoints") == 1
    yaml_before = open(os.path.join(run_dir, "run.yaml")).read()
    # resume; then kill -9 of the supervisor: its trainer must not go on unwatched
    rep = _train(cfg, "resume")
    assert rep["started"] and rep["message"].startswith("training resumed"), rep
    st = _until(cfg, lambda s: s["phase"] == "training" and s["pid"], "resumed training")
    assert st["step"] < TOTAL - SAVE, "the run was about to end before the test could kill it"
    sup = st["supervisor_pid"]
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: not _alive(st["pid"]), 120, 0.1, "the trainer's end with its supervisor")
    output = os.path.join(run_dir, "output")
    assert TOTAL not in progress.checkpoints(output, "hsx-eagle3"), "the trainer went on to the end unwatched"
    st = _train(cfg, "status")
    assert st["phase"] == "crashed" and st["reason"].startswith(
        f"supervisor (pid {sup}) is gone; it was training"
    )
    # resume again, to the end: run.yaml as the first launch wrote it, only resume_from added
    assert _train(cfg, "resume")["started"]
    st = _until(cfg, lambda s: s["phase"] not in ("preflight", "loading", "training"), "end")
    assert st["phase"] == "done" and st["step"] == TOTAL, st
    assert st["export"] is None and not os.path.exists(
        os.path.join(run_dir, "export")
    )  # export_at_end = false
    assert open(os.path.join(run_dir, "run.yaml")).read() == yaml_before
    argv = json.load(open(os.path.join(run_dir, "command.json")))["argv"]
    assert argv[-1].startswith(f"training.resume_from={os.path.join(run_dir, 'output', 'hsx-eagle3-step')}")
    whole, cut = _losses(uninterrupted[1]), _losses(run_dir)
    assert sorted(cut) == sorted(whole)
    assert all(cut[s] == whole[s] for s in whole), {
        s: (cut[s], whole[s]) for s in whole if cut[s] != whole[s]
    }
    # what `/train chart` draws: three launches, the two cuts and the end, every step once
    from bot.render.train_chart import story
    from runner.contract.train import TrainRecord
    from runner.contract.train_history import parse_history

    hist = parse_history(json.loads(runner("train", "history", "--json", "--config", cfg, check=True).stdout))
    told = story(hist, TrainRecord.from_dict(st))
    # a launch whose every step was trained again after it (it crashed before its next checkpoint)
    # draws no line of its own: each step once, as the saved draft learned it (issue 48)
    assert {m.launch for m in told.marks} == {1, 2, 3} and 2 <= len(told.launches) <= 3, told.marks
    assert [m.kind for m in told.marks].count("crashed") == 2, told.marks
    assert told.count("resumed") == 2 and told.count("done") == 1, told.marks
    # every step a supervisor read; a killed supervisor's trainer may have logged a few more
    # before it died with it, which train.log keeps and the next launch goes on after
    crash2 = [m.step for m in told.marks if m.kind == "crashed"][1]
    back = [m.step for m in told.marks if m.kind == "resumed"][1]
    steps = {p.step for p in told.points}
    assert len(told.points) == len(steps), [p.step for p in told.points]  # no step twice
    assert steps <= set(whole) and all(crash2 < s <= back for s in set(whole) - steps), (crash2, back)


def test_setup_builds_or_finds_the_cpu_lane_and_accepts_the_real_wheel(extracted, train_python):
    rep = json.loads(runner("train", "setup", "--json", "--root", os.path.join(ROOT, ".cache"),
                            "--config", extracted, check=True).stdout)  # fmt: skip
    assert rep["ok"] and rep["python"] == train_python and rep["version"] == "0.2.0"
    st = _train(extracted, "status")
    assert st["phase"] == "stopped" and st["reason"] == "not started yet"


def test_a_trainer_that_fails_at_once_reads_crashed_with_its_errors_last_line(
    extracted, train_python, tmp_path
):
    cfg = _config(extracted, str(tmp_path / "bad"), train_python)
    with open(cfg, "a") as f:
        f.write("no_such_key = 1\n")  # into [train.specforge.training]: SpecForge refuses it
    assert _train(cfg, "start")["started"]
    st = _until(cfg, lambda s: s["phase"] not in ("preflight", "loading", "training"), "end")
    assert st["phase"] == "crashed" and "exited with code" in st["reason"], st
    assert "ValidationError" in st["reason"] and "no_such_key" in st["reason"], st["reason"]
    assert "no complete checkpoint" in st["reason"]
    assert _train(cfg, "resume", code=3)["reason"].startswith("no complete checkpoint")


def test_stop_ends_the_trainer_and_says_stopped_with_the_checkpoint_kept(
    extracted, train_python, tmp_path, paced
):
    cfg = _config(extracted, str(tmp_path / "stopped"), train_python)
    assert _train(cfg, "start")["started"]
    st = _until(cfg, lambda s: s["phase"] == "training", "training")
    rep = _train(cfg, "stop")
    assert rep["stopped"] and rep["done"] and rep["phase"] == "stopped", rep
    assert not _alive(st["pid"])
    st = _train(cfg, "status")
    assert st["phase"] == "stopped" and "stopped on request" in st["reason"]
    assert _train(cfg, "stop", code=3)["reason"] == "no training run is going"


def test_the_cpu_lanes_loss_shim_replaces_the_triton_kernel_with_the_same_maths(train_python):
    code = (
        "import torch, specforge.algorithms.eagle3.model as m\n"
        "torch.manual_seed(0); x = torch.randn(2, 5, 7); t = torch.softmax(torch.randn(2, 5, 7), -1)\n"
        "mask = (torch.rand(2, 5, 1) > 0.3).float()\n"
        "ref = -torch.sum(mask * t * torch.nn.LogSoftmax(dim=2)(x.float()), 2).mean()\n"
        "print(m.LogSoftmaxLoss.__name__, "
        "torch.allclose(m.LogSoftmaxLoss.apply(x, t, mask), ref))\n"
    )
    env = {**os.environ, **specforge_cpu.env(train_python)}
    p = subprocess.run([train_python, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and p.stdout.split() == ["_TorchLogSoftmaxLoss", "True"], (
        p.stdout + p.stderr[-2000:]
    )


def test_the_demos_pace_makes_each_optimizer_step_of_the_cpu_lanes_trainer_last_at_least_its_seconds(
    train_python,
):
    """hsx demo's training is watched, killed and resumed by hand: the CPU lane's shim holds each
    optimizer step (whatever optimizer SpecForge wraps) for HSX_DEMO_TRAIN_PACE_S."""
    code = (
        "import time, torch, specforge.algorithms.eagle3.model\n"
        "w = torch.nn.Parameter(torch.ones(2)); opt = torch.optim.AdamW([w])\n"
        "t0 = time.monotonic()\n"
        "for _ in range(3):\n    w.sum().backward(); opt.step()\n"
        "print(time.monotonic() - t0)\n"
    )
    env = {**os.environ, **specforge_cpu.env(train_python), PACE_ENV: "0.5"}
    p = subprocess.run([train_python, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and float(p.stdout) >= 1.5, p.stdout + p.stderr[-2000:]
    env[PACE_ENV] = "0"
    p = subprocess.run([train_python, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and float(p.stdout) < 1.5, p.stdout + p.stderr[-2000:]


def test_a_run_killed_before_its_first_checkpoint_starts_again(extracted, train_python, tmp_path, paced):
    cfg = _config(extracted, str(tmp_path / "early"), train_python)
    assert _train(cfg, "start")["started"]
    st = _until(cfg, lambda s: s["pid"] and s["checkpoint_step"] is None, "a trainer before its first save")
    os.kill(st["pid"], signal.SIGKILL)
    st = _until(cfg, lambda s: s["phase"] == "crashed", "crashed record")
    assert st["checkpoint_step"] is None and "no complete checkpoint" in st["reason"]
    assert _train(cfg, "resume", code=3)["reason"].startswith("no complete checkpoint")
    assert _train(cfg, "start")["started"]  # nothing to lose: a fresh start is the way on
    st = _until(cfg, lambda s: s["phase"] not in ("preflight", "loading", "training"), "end")
    assert st["phase"] == "done" and st["step"] == TOTAL, st
    log = open(os.path.join(str(tmp_path / "early"), "train.log")).read()
    assert log.count("--- hsx: start at ") == 2  # the cut-short launch's log is kept


def test_a_training_run_makes_compact_adopt_repair_and_a_new_extraction_refuse(
    extracted, train_python, tmp_path
):
    cfg = _config(
        extracted, str(tmp_path / "busy"), train_python, epochs=10 * EPOCHS
    )  # going while it checks
    assert _train(cfg, "start")["started"]
    st = _until(cfg, lambda s: s["phase"] == "training", "training")
    out = os.path.join(os.path.dirname(extracted), "out")
    try:
        for argv in (["compact"], ["adopt", out], ["verify", "--repair"], ["start"], ["resume"], ["run"]):
            p = runner(*argv, "--json", "--config", cfg)
            assert p.returncode == 3, (argv, p.stdout, p.stderr)
            why = json.loads(p.stdout)["reason"]
            assert (
                f"a training run (supervisor pid {st['supervisor_pid']}, run dir {tmp_path / 'busy'})" in why
            )
            assert "hsx-runner train stop" in why
        assert (
            runner("verify", "--json", "--config", cfg).returncode == 0
        )  # a read-only verify runs beside it
    finally:
        p = runner("train", "stop", "--json", "--config", cfg, timeout=300)
    # stopped, or (a machine slow enough that the checks outlasted its steps) ended on its own
    assert (p.returncode == 0 and json.loads(p.stdout)["done"]) or _train(cfg, "status")["phase"] == "done", p
    assert runner("verify", "--repair", "--json", "--config", cfg).returncode == 0  # free again


def test_a_held_job_lock_or_an_unfinished_extraction_makes_train_start_refuse(
    extracted, train_python, tmp_path, demo_assets
):
    cfg = _config(extracted, str(tmp_path / "later"), train_python)
    out = os.path.join(os.path.dirname(extracted), "out")
    code = f"from runner.output.lock import JobLock; JobLock({os.path.join(out, '.lock')!r}).acquire(); print(1, flush=True); import time; time.sleep(120)"
    holder = subprocess.Popen(
        [os.path.join(ROOT, ".venv", "bin", "python"), "-c", code], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"1"
        for action in ("start", "resume"):
            rep = _train(cfg, action, code=3)
            assert rep["reason"].startswith(f"the extraction's runner (pid {holder.pid}) holds {out}"), rep
    finally:
        holder.kill()
        holder.wait()
    assert not os.path.exists(tmp_path / "later" / "run.yaml")  # nothing written for a refused start
    fresh = _config(write_job(tmp_path / "fresh", demo_assets, 2), str(tmp_path / "fresh-run"), train_python)
    rep = _train(fresh, "start", code=3)
    assert "is stopped, not done: train once it is done" in rep["reason"], rep


def test_a_kill_during_a_save_resumes_from_the_previous_complete_checkpoint(
    uninterrupted, extracted, train_python, tmp_path, paced
):
    run_dir = str(tmp_path / "torn")
    cfg = _config(extracted, run_dir, train_python)
    assert _train(cfg, "start")["started"]
    st = _until(cfg, lambda s: s["checkpoint_step"] is not None, "checkpoint")
    os.kill(st["pid"], signal.SIGKILL)
    st = _until(cfg, lambda s: s["phase"] == "crashed", "crashed record")
    good = st["checkpoint_step"]
    assert good < TOTAL, "the run ended before the test could kill it"
    # what a kill -9 inside the next save leaves: the shared state written, a rank's file still a
    # .tmp, and the -latest link between its remove and its symlink
    output = os.path.join(run_dir, "output")
    for s in progress.checkpoints(output, "hsx-eagle3"):
        if s > good:
            shutil.rmtree(progress.step_dir(output, "hsx-eagle3", s))
    torn = progress.step_dir(output, "hsx-eagle3", good + SAVE)
    os.makedirs(torn)
    shutil.copy(os.path.join(progress.step_dir(output, "hsx-eagle3", good), "training_state.pt"), torn)
    with open(os.path.join(torn, "training_state_rank0.pt.tmp"), "wb") as f:
        f.write(b"half")
    os.unlink(os.path.join(output, "hsx-eagle3-latest"))
    assert _train(cfg, "status")["checkpoint_step"] == good
    assert _train(cfg, "resume")["started"]
    st = _until(cfg, lambda s: s["phase"] not in ("preflight", "loading", "training"), "end")
    assert st["phase"] == "done" and st["step"] == TOTAL, st
    argv = json.load(open(os.path.join(run_dir, "command.json")))["argv"]
    assert argv[-1] == f"training.resume_from={progress.step_dir(output, 'hsx-eagle3', good)}"
    whole, cut = _losses(uninterrupted[1]), _losses(run_dir)
    assert all(cut[s] == whole[s] for s in whole), {
        s: (cut[s], whole[s]) for s in whole if cut[s] != whole[s]
    }


def test_two_ranks_on_gloo_train_through_a_kill_to_the_end_with_each_ranks_file(
    extracted, train_python, tmp_path, paced
):
    """[train] gpus = 2: SpecForge's own launcher runs torchrun and two ranks, each in a session
    of its own. A kill -9 of the launcher leaves none of them going; the resume ends with every
    rank's file in its checkpoint."""
    run_dir = str(tmp_path / "two")
    total = TOTAL // 2  # each rank takes half the files
    cfg = _config(extracted, run_dir, train_python, gpus=2)
    assert _train(cfg, "start")["started"]
    st = _until(cfg, lambda s: s["checkpoint_step"] is not None, "checkpoint")
    assert st["world"] == 2 and st["total_steps"] == total and st["step"] < total, st
    tree = {p for p in procs.descendants(st["pid"]) if "specforge.cli" in procs.cmdline(p)}
    assert len(tree) == 3, tree  # torchrun and its two ranks
    assert json.load(open(os.path.join(run_dir, "command.json")))["env"]["OMP_NUM_THREADS"] == "1"
    os.kill(st["pid"], signal.SIGKILL)
    st = _until(cfg, lambda s: s["phase"] == "crashed", "crashed record")
    assert "killed by signal 9" in st["reason"] and not any(_alive(p) for p in tree), st
    assert st["checkpoint_step"] < total, st  # the resume has steps left, whose lines both ranks print
    assert _train(cfg, "resume")["started"]
    st = _until(cfg, lambda s: s["phase"] not in ("preflight", "loading", "training"), "end")
    assert st["phase"] == "done" and st["step"] == st["checkpoint_step"] == total, st
    names = set(os.listdir(progress.step_dir(os.path.join(run_dir, "output"), "hsx-eagle3", total)))
    assert {"training_state.pt", "training_state_rank0.pt", "training_state_rank1.pt"} <= names, names
    last = open(os.path.join(run_dir, "train.log")).read().rsplit("--- hsx: resume at ", 1)[1]
    assert [s for s, _ in progress.parse_steps(last)].count(total - total % LOG) == 2  # both ranks print it
