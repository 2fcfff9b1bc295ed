"""A regeneration rank whose Slurm task was requeued past `[cluster] max_requeues`, or again with
nothing done since its last requeue (issue 48): it ends failed saying so, with its count and why,
and starts no server. The real supervisor, as
the batch script runs it, in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from runner.job import requeue
from tests.conftest import write_config

ROW = '{"conversations": [{"role": "user", "content": "ka lo"}], "id": 1}\n'


def _rank(tmp_path, demo_assets, restarts: int, max_requeues: int, record=None, note=None):
    """The rank's supervisor as its requeued task runs it (its last record and the batch shell's
    note as given); its exit, its record after and its run dir."""
    (tmp_path / "data.jsonl").write_text(ROW)
    job = {
        "model": str(demo_assets / "model"),
        "dataset": str(tmp_path / "data.jsonl"),
        "out": str(tmp_path / "out"),
    }
    conf = write_config(
        tmp_path / "hsx.toml", job=job, cluster={"engine": "slurm", "max_requeues": max_requeues}
    )
    root = tmp_path / "out-regenerate"
    (root / ".slurm").mkdir(parents=True)
    if record is not None:
        (root / "status.rank0.json").write_text(json.dumps(record))
    if note is not None:
        (root / ".slurm" / "requeued.0").write_text(note)
    argv = [
        sys.executable,
        "-m",
        "runner.regenerate.supervisor",
        str(root),
        conf,
        "--rank",
        "0",
        "--world",
        "1",
    ]
    env = {**os.environ, "SLURM_RESTART_COUNT": str(restarts)}
    p = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=600
    )  # a starved machine: 120 s ran out
    assert p.returncode == 1, p.stderr[-2000:]
    with open(root / "status.rank0.json") as f:
        rec = json.load(f)
    assert rec["phase"] == "failed" and rec["requeues"] == restarts, rec
    assert not any(n.startswith("server") for n in os.listdir(root)), os.listdir(root)  # none started
    return rec


def test_a_rank_past_its_requeues_ends_failed_saying_so_and_starts_no_server(tmp_path, demo_assets):
    rec = _rank(tmp_path, demo_assets, 2, 1, note=f"2 {requeue.SIGNALLED}\n")  # the shell's note of the 2nd
    assert rec["reason"].startswith("requeued 2 times, past [cluster] max_requeues = 1")
    assert rec["requeued_for"] == requeue.SIGNALLED, rec


def test_a_rank_requeued_again_with_nothing_done_between_ends_failed_and_starts_no_server(
    tmp_path, demo_assets
):
    """The first requeue kept its progress (0 rows); the second finds none since: it would fail the
    same way again, so it stops within its budget of 3, for the operator's alert."""
    rec = _rank(tmp_path, demo_assets, 2, 3, {"phase": "crashed", "requeues": 1, "requeued_from": 0})
    assert "the last two at 0 with nothing done between" in rec["reason"] and rec["requeued_from"] == 0, rec
