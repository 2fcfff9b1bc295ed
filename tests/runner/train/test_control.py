"""The `hsx-runner train` verbs' own rules (runner/train/control.py): the run dir's disk use, a resume after a killed supervisor."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from runner.train import control, record, runspec

from .units import _cfg


def test_the_run_dirs_disk_use_counts_its_files_and_not_the_links_to_the_output(tmp_path):
    big = tmp_path / "out" / "data_0.ckpt"
    big.parent.mkdir()
    big.write_bytes(os.urandom(1 << 20))
    run = tmp_path / "run"
    (run / "features").mkdir(parents=True)
    (run / "features" / "data_0.ckpt").symlink_to(big)
    (run / "output" / "hsx-eagle3-step20").mkdir(parents=True)
    (run / "output" / "hsx-eagle3-step20" / "training_state.pt").write_bytes(os.urandom(300_000))
    (run / "output" / "hsx-eagle3-latest").symlink_to(run / "output" / "hsx-eagle3-step20")
    got = control.disk(str(run))
    assert 300_000 <= got["run_bytes"] < 300_000 + 64 * 1024  # the checkpoint, once; the link trees nothing
    assert got["disk_free"] > 0 and os.path.ismount(got["disk_path"])
    assert control.disk(str(tmp_path / "none")) == {}


def test_a_resume_first_ends_what_a_killed_supervisors_launch_left_then_picks_the_checkpoint(tmp_path):
    """torchrun gives ranks 30 s to end after their launcher dies: one still going could save
    and rotate away the checkpoint a resume picked. Only this run's are ended."""
    from runner.contract.status import Phase, StatusRecord, write_record

    cfg = _cfg(tmp_path, python=sys.executable)
    write_record(str(tmp_path / "out" / "status.json"), StatusRecord(job="t", phase=Phase.DONE))
    root = runspec.run_dir(cfg)
    os.makedirs(root)
    open(os.path.join(root, ".hsx-run"), "w").close()  # hsx's own run dir
    open(os.path.join(root, "run.yaml"), "w").write(
        json.dumps({k: {} for k in ("model", "data", "training", "deployment")})
    )
    record.Record(
        root, {"phase": "crashed", "run_id": "hsx-eagle3", "output_dir": f"{root}/output", "world": 2}
    ).write()
    sleep = "import time; time.sleep(120)"
    ours = subprocess.Popen(
        [sys.executable, "-c", sleep, "specforge.cli", "train", "-c", os.path.join(root, "run.yaml")]
    )
    other = subprocess.Popen(
        [sys.executable, "-c", sleep, "specforge.cli", "train", "-c", str(tmp_path / "run.yaml")]
    )
    try:
        rep = control.resume(cfg)
        assert rep.code == 3 and "no complete checkpoint" in rep.text  # what it found once the stray was gone
        assert ours.wait(timeout=10) == -9 and other.poll() is None
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()
