"""An extraction rank whose Slurm task is requeued again with nothing extracted since its last
requeue (issue 48: a task that fails the same way twice): it ends failed saying so, within its
budget, and starts no server; with work done between, it extracts. The runner as the batch script
runs it (`hsx-runner run --rank`), in a process of its own, with Slurm's restart count."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import RUNNER
from tests.runner.helpers import out_dir

pytestmark = pytest.mark.slow  # the runner imports torch; the second case extracts


def _requeued(conf: str, restarts: int, record: dict) -> tuple:
    out = out_dir(conf)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "status.rank0.json"), "w") as f:
        json.dump({"job": "test", "phase": "crashed", **record}, f)
    env = {**os.environ, "SLURM_RESTART_COUNT": str(restarts)}
    argv = [RUNNER, "run", "--config", conf, "--rank", "0", "--world", "1"]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    with open(os.path.join(out, "status.rank0.json")) as f:
        return p, json.load(f)


def test_requeued_again_with_nothing_done_between_it_stops_and_with_work_done_it_extracts(job):
    conf = job(samples=4)
    p, rec = _requeued(conf, 2, {"done": 0, "requeues": 1, "requeued_from": 0})
    assert p.returncode == 1, p.stderr[-2000:]
    assert rec["phase"] == "failed" and "the last two at 0 with nothing done between" in rec["reason"], rec
    assert rec["requeues"] == 2 and rec["requeued_from"] == 0
    assert not [n for n in os.listdir(out_dir(conf)) if n.startswith("server")]  # none started

    p, rec = _requeued(conf, 2, {"done": 3, "requeues": 1, "requeued_from": 1})  # 2 done since
    assert p.returncode == 0, p.stderr[-2000:]
    assert rec["phase"] == "done" and rec["requeues"] == 2 and rec["requeued_from"] == 3, rec
