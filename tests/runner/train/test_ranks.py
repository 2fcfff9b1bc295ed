"""Several trainer processes under the supervisor, with a stand-in for SpecForge's launcher shaped
like the real one (a launcher, a torchrun, two ranks, each in a session of its own, every rank
printing every step line): real processes, the real supervisor, no trainer. The real SpecForge
on two ranks is tests/runner/train/test_specforge.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from runner import procs
from runner.train import progress, record
from tests.runner.helpers import wait_for

# specforge/cli.py of the stand-in: ``train`` is the launcher, ``run`` torchrun, ``rank`` a rank.
# On SIGTERM the launcher leaves its ranks going, as a teardown that takes its time does.
CLI = """import os, signal, subprocess, sys, time
role, yaml = sys.argv[1], sys.argv[-1]
me = [sys.executable, "-m", "specforge.cli"]
if role == "train":
    def term(*_):
        open(os.path.join(os.path.dirname(yaml), "launcher.term"), "w").write("TERM")
        os._exit(143)
    signal.signal(signal.SIGTERM, term)
    subprocess.Popen(me + ["run", "--config", yaml], start_new_session=True).wait()
elif role == "run":
    ranks = [subprocess.Popen(me + ["rank", "--config", yaml], start_new_session=True) for _ in range(2)]
    [r.wait() for r in ranks]
else:
    for step in range(1, 1200):  # a minute at most, should a test leave it
        sys.stdout.write(f"step {step}: {{'loss': 1.5, 'acc': 0.25}}")
        sys.stdout.flush()
        sys.stdout.write("\\n")  # the text and its newline apart, as print does unbuffered
        sys.stdout.flush()
        time.sleep(0.05)
"""


@pytest.fixture(autouse=True)
def _no_stand_in_left(tmp_path):
    yield
    for p in procs.pids():
        if "specforge.cli" in procs.cmdline(p) and any(a.startswith(str(tmp_path)) for a in procs.cmdline(p)):
            os.kill(p, signal.SIGKILL)


def _run(tmp_path, name):
    """A run dir whose command.json starts the stand-in, and its supervisor started."""
    site = tmp_path / "site"
    (site / "specforge").mkdir(parents=True, exist_ok=True)
    (site / "specforge" / "__init__.py").write_text("")
    (site / "specforge" / "cli.py").write_text(CLI)
    root, out = tmp_path / name, tmp_path / "out"
    root.mkdir()
    yaml = str(root / "run.yaml")
    (root / "run.yaml").write_text("{}\n")
    argv = [sys.executable, "-m", "specforge.cli", "train", "-c", yaml]
    (root / "command.json").write_text(json.dumps({"argv": argv, "env": {"PYTHONPATH": str(site)}}))
    _relaunch(root, out)
    return root


def _relaunch(root, out) -> subprocess.Popen:
    rec = record.Record(str(root), {**record.Record.load(str(root)).d, "phase": "preflight", "world": 2,
                                    "features": str(out), "output_dir": str(root / "output"), "run_id": "r"})  # fmt: skip
    rec.write()
    return subprocess.Popen([sys.executable, "-m", "runner.train.supervisor", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def _ranks_of(pid: int) -> set[int]:
    return {p for p in procs.descendants(pid) if "specforge.cli" in procs.cmdline(p)}


def _alive(pid: int) -> bool:
    st = procs.proc_stat(pid)
    return st is not None and st[0] != "Z"


def test_a_killed_launcher_leaves_no_rank_going_in_sessions_of_their_own(tmp_path):
    root = _run(tmp_path, "a")
    d = wait_for(lambda: (d := record.read(str(root)))["pid"] and (d["step"] or 0) >= 3 and d, what="steps")
    tree = wait_for(lambda: len(t := _ranks_of(d["pid"])) == 3 and t, what="torchrun and two ranks")
    assert {procs.parent_and_group(p)[1] for p in tree} == tree  # each leads a process group of its own
    os.kill(d["pid"], signal.SIGKILL)
    d = wait_for(lambda: (d := record.read(str(root)))["phase"] == "crashed" and d, what="crashed")
    assert "killed by signal 9" in d["reason"]
    assert not any(_alive(p) for p in tree), [p for p in tree if _alive(p)]


def test_a_killed_supervisors_launcher_gets_sigterm_and_the_next_launch_ends_what_it_left(tmp_path):
    root = _run(tmp_path, "b")
    d = wait_for(lambda: (d := record.read(str(root)))["pid"] and (d["step"] or 0) >= 3 and d, what="steps")
    tree = wait_for(lambda: len(t := _ranks_of(d["pid"])) == 3 and t, what="torchrun and two ranks")
    os.kill(d["supervisor_pid"], signal.SIGKILL)
    # several ranks: the launcher's death signal is SIGTERM, so SpecForge's launcher ends them
    wait_for(lambda: (root / "launcher.term").exists(), what="the launcher's SIGTERM")
    assert all(_alive(p) for p in tree)  # the stand-in left them, as a slow teardown does
    sup = _relaunch(root, tmp_path / "out")
    try:
        wait_for(lambda: record.read(str(root))["pid"] not in (None, d["pid"]), what="the next launch")
        assert not any(_alive(p) for p in tree), [p for p in tree if _alive(p)]
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.wait(30)
    assert record.read(str(root))["phase"] == "stopped"


def test_each_step_counts_once_though_every_rank_prints_it_and_prints_can_share_a_line():
    log = [
        "step 2: {'loss': 2.0, 'acc': 0.1}",
        "step 2: {'loss': 2.0, 'acc': 0.1}",  # the other rank's copy
        "step 4: {'loss': 1.5, 'acc': 0.2}step 4: {'loss': 1.5, 'acc': 0.2}",  # text, text, newline, newline
        "",
        "step 4: {'eval/avg_acc': 0.5, 'eval/simulated_acc_len': 1.8}",  # an eval at a logged step
        "step 4: {'eval/avg_acc': 0.5, 'eval/simulated_acc_len': 1.8}",
        "/site-packages/x.py:3: UserWarning: step 6: {'loss': 1.0, 'acc': 0.3}",  # a rank's warning ahead of it
        "step 6: {'loss': 1.0, 'acc': 0.3}",
        "step 8: {'loss': 0.9",  # cut short
    ]
    s = progress.StepLines()
    got = [(step, sorted(m)) for line in log for step, m in s.feed(line)]
    assert got == [
        (2, ["acc", "loss"]), (4, ["acc", "loss"]), (4, ["eval/avg_acc", "eval/simulated_acc_len"]),
        (6, ["acc", "loss"]),
    ]  # fmt: skip
