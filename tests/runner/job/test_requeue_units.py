"""The pieces of a Slurm task's requeue (issue 48), as units: the count Slurm gives the rank, why
it was requeued (the batch script's note, else Slurm's own), the budget, the batch script bash
reads, and the config keys. The real requeues are tests/cluster/test_requeue.py."""

from __future__ import annotations

import subprocess

import pytest

from runner.contract.config import from_dict
from runner.contract.errors import ConfigError
from runner.engines import slurm_io
from runner.job import requeue


def test_the_count_is_slurms_restart_count(monkeypatch):
    for env, n in (("", 0), ("2", 2), ("x", 0), ("-1", 0)):
        monkeypatch.setenv("SLURM_RESTART_COUNT", env)
        assert requeue.count() == n, env
    monkeypatch.delenv("SLURM_RESTART_COUNT")
    assert requeue.count() == 0


def test_why_is_the_scripts_note_for_that_requeue_else_slurms(tmp_path):
    d = str(tmp_path)
    assert requeue.why(d, 0, 0) is None and requeue.why(d, 0, 1) == requeue.BY_SLURM
    with open(requeue.note_path(d, 0), "w") as f:
        f.write(f"1 {requeue.SIGNALLED}\n")
    assert requeue.why(d, 0, 1) == requeue.SIGNALLED
    assert requeue.why(d, 0, 2) == requeue.BY_SLURM  # the note is of the first; Slurm did the second
    assert requeue.why(d, 1, 1) == requeue.BY_SLURM  # another rank's note is not this one's


def test_the_budget():
    assert requeue.past_budget(0, 0) is None and requeue.past_budget(3, 3) is None
    assert "requeued 4 times, past [cluster] max_requeues = 3" in requeue.past_budget(4, 3)


@pytest.mark.parametrize("on,most", [(True, 2), (False, 0)])
def test_the_batch_script_traps_the_signal_and_requeues_within_the_budget(tmp_path, on, most):
    cfg = from_dict({"job": {"out": str(tmp_path / "out")}, "cluster": {"requeue": on, "max_requeues": 2}})
    path = slurm_io.array_script(cfg, str(tmp_path / "out" / ".slurm" / "x.sh"), ["-m", "m"], 4, "start")
    text = open(path).read()
    assert subprocess.run(["bash", "-n", path]).returncode == 0, text
    assert "trap requeue USR1" in text and f'[ "$n" -lt {most} ] || return 0' in text
    assert f'{tmp_path}/out/.slurm/requeued."$SLURM_ARRAY_TASK_ID"' in text
    argv = slurm_io.sbatch_argv(cfg, [0, 1], path)
    assert ("--signal=B:USR1@120" in argv) is on and ("--requeue" in argv) is on


@pytest.mark.parametrize("bad", [{"max_requeues": -1}, {"requeue_signal_s": 5}, {"requeue_signal_s": 70000}])
def test_the_keys_are_checked(bad):
    with pytest.raises(ConfigError, match=r"\[cluster\]"):
        from_dict({"cluster": bad})


def test_a_task_requeued_again_with_nothing_done_between_stops():
    assert requeue.stalled(1, 0, None) is None  # a first requeue has nothing to compare with
    assert requeue.stalled(2, 40, 12) is None  # work done since the last: it goes on
    said = requeue.stalled(2, 12, 12)
    assert said.startswith("requeued 2 times, the last two at 12 with nothing done between")
    assert requeue.stalled(3, 12, 12) and requeue.stalled(2, 0, 0)
    assert requeue.stalled(0, 0, 0) is None  # not requeued: a start or a resume
