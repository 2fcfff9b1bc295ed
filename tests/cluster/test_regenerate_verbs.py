"""`hsx-runner regenerate` on the Slurm engine with sbatch and squeue stubbed where slurm_io runs
them: what is submitted (the ranks not done, as one array of the regeneration's supervisor), what
resume does when only the output is missing, and the refusals between one box and Slurm."""

from __future__ import annotations

import json
import os

import pytest

from runner.contract import replies
from runner.contract.config import load
from runner.contract.status import NOT_STARTED
from runner.engines import slurm_io
from runner.engines.slurm_merge import Task
from runner.regenerate import committed, control, record
from tests.conftest import write_config
from tests.runner.helpers import runner_json

ROWS = 9


@pytest.fixture
def conf(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"conversations": [{"role": "user", "content": f"q{i}"}]}) + "\n"
                            for i in range(ROWS)))  # fmt: skip
    return write_config(tmp_path / "hsx.toml", job={"name": "t", "model": "m", "dataset": "data.jsonl", "out": "out"},
                        cluster={"engine": "slurm", "ranks": 3, "gpus_per_node": 0, "partition": "gpu"},
                        regenerate={"max_new_tokens": 8})  # fmt: skip


@pytest.fixture
def slurm(monkeypatch):
    """sbatch answers job 41, 42, … and keeps each argv; squeue says what ``tasks`` holds."""
    seen = {"argv": [], "tasks": {}}

    def sbatch(argv):
        seen["argv"].append(argv)
        return str(40 + len(seen["argv"]))

    monkeypatch.setattr(slurm_io, "sbatch", sbatch)
    monkeypatch.setattr(slurm_io, "query", lambda ids: dict(seen["tasks"]))
    return seen


def regen(conf: str, action: str) -> tuple[int, dict]:
    return runner_json("regenerate", conf, action)


def _rank_done(root: str, rank: int, rows: range) -> None:
    for i in rows:
        conv = [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
        committed.append(
            os.path.join(root, f"rows.rank{rank}.jsonl"),
            {"row": i, "data": {"conversations": conv}, "tokens": 2},
        )
    rec = record.load(root, rank)
    rec.update(phase="done", done=len(rows), total=len(rows))
    rec.write()


def test_start_submits_every_rank_as_one_array_of_the_supervisor(conf, slurm):
    code, rep = regen(conf, "status")
    assert code == 0 and rep["phase"] == "stopped" and rep["reason"] == NOT_STARTED
    code, rep = regen(conf, "start")
    assert code == 0 and rep["ranks"] == [0, 1, 2] and rep["world"] == 3 and rep["job_id"] == "41", rep
    root = rep["run_dir"]
    argv = slurm["argv"][0]
    for want in ("--array=0,1,2", "--job-name=hsx-regenerate-t", "--partition=gpu",
                 f"--output={root}/logs/slurm-%A_%a.out"):  # fmt: skip
        assert want in argv, (want, argv)
    (script,) = [
        x for x in open(argv[-1]).read().splitlines() if "--rank" in x
    ]  # the rank, in the background
    assert f"-m runner.regenerate.supervisor {root} {os.path.abspath(conf)}" in script
    assert script.endswith('--rank "$SLURM_ARRAY_TASK_ID" --world 3 &')
    st = slurm_io.load_state(root)
    assert st["ranges"] == [[0, 3], [3, 6], [6, 9]] and st["tasks"]["2"]["job"] == "41" and st["started_at"]
    code, rep = regen(conf, "start")
    assert code == replies.REFUSED and "holds a regeneration" in rep["reason"] and len(slurm["argv"]) == 1
    slurm["tasks"] = {"41_0": Task("RUNNING", "n1"), "41_1": Task("PENDING"), "41_2": Task("PENDING")}
    code, rep = regen(conf, "status")
    assert (
        code == 0
        and rep["phase"] == "preflight"
        and [r["state"] for r in rep["ranks"]] == ["running", "pending", "pending"]
    )
    assert rep["total"] == ROWS and rep["output"] == control.output(load(conf)) and rep["history"] == []


def test_resume_submits_only_the_ranks_not_done_nor_queued(conf, slurm):
    code, rep = regen(conf, "start")
    root = rep["run_dir"]
    _rank_done(root, 0, range(0, 3))
    slurm["tasks"] = {"41_0": Task("COMPLETED"), "41_1": Task("FAILED", "n2"), "41_2": Task("RUNNING", "n1")}
    code, rep = regen(conf, "resume")
    assert code == 0 and rep["ranks"] == [1] and "--array=1" in slurm["argv"][1], rep
    assert (
        slurm_io.load_state(root)["tasks"]["1"]["job"] == "42"
        and slurm_io.load_state(root)["tasks"]["0"]["job"] == "41"
    )
    slurm["tasks"].update({"42_1": Task("PENDING")})
    code, rep = regen(conf, "resume")
    assert (
        code == replies.REFUSED and "already running: 2 rank(s)" in rep["reason"] and len(slurm["argv"]) == 2
    )


def test_a_resume_with_every_row_committed_writes_the_output_once_no_rank_is_ending(conf, slurm):
    code, rep = regen(conf, "start")
    root, cfg = rep["run_dir"], load(conf)
    for r, rows in enumerate((range(0, 3), range(3, 6), range(6, 9))):
        _rank_done(root, r, rows)
    slurm["tasks"] = {"41_0": Task("COMPLETED"), "41_1": Task("COMPLETED"), "41_2": Task("COMPLETING", "n1")}
    code, rep = regen(conf, "status")
    assert rep["phase"] == "regenerating" and "being written" in rep["reason"]  # its rank writes it now
    code, rep = regen(conf, "resume")
    assert (
        code == replies.REFUSED
        and "still ending" in rep["reason"]
        and not os.path.exists(control.output(cfg))
    )
    slurm["tasks"]["41_2"] = Task("COMPLETED")  # it ended before writing: the output is resume's to write
    code, rep = regen(conf, "status")
    assert rep["phase"] == "crashed" and "resume writes it" in rep["reason"]
    code, rep = regen(conf, "resume")
    assert code == 0 and rep["written"] and rep["ranks"] == [] and len(slurm["argv"]) == 1, rep
    assert [json.loads(x)["conversations"][1]["content"] for x in open(control.output(cfg))] == [
        f"a{i}" for i in range(ROWS)
    ]
    code, rep = regen(conf, "status")
    assert rep["phase"] == "done" and rep["done"] == ROWS
    code, rep = regen(conf, "resume")
    assert code == replies.REFUSED and "is done" in rep["reason"]


def test_one_box_and_slurm_never_share_a_run_dir(conf, slurm, tmp_path):
    cfg = load(conf)
    root = control.run_dir(cfg)
    os.makedirs(root)
    rec = record.load(root)
    rec.update(phase="stopped", started_at="2026-01-01T00:00:00Z")
    rec.write()  # a regeneration run on one box
    code, rep = regen(conf, "resume")
    assert code == replies.REFUSED and 'engine = "local"' in rep["reason"]
    code, rep = regen(conf, "start")
    assert code == replies.REFUSED and "holds a regeneration" in rep["reason"] and not slurm["argv"]
    os.unlink(os.path.join(root, "status.json"))
    code, rep = regen(conf, "resume")
    assert code == replies.REFUSED and "nothing to resume" in rep["reason"]
    code, rep = regen(conf, "start")
    assert code == 0
    local = conf.replace("hsx.toml", "local.toml")
    with open(conf) as f, open(local, "w") as g:
        g.write(f.read().replace('engine = "slurm"', 'engine = "local"'))
    code, rep = regen(local, "start")  # this box's start on the Slurm run's dir
    assert code == replies.REFUSED and "on Slurm" in rep["reason"]


def test_a_dataset_changed_since_the_split_is_refused(conf, slurm):
    code, rep = regen(conf, "start")
    with open(load(conf).job.dataset, "a") as f:
        f.write(json.dumps({"conversations": [{"role": "user", "content": "one more"}]}) + "\n")
    code, rep = regen(conf, "resume")
    assert code == replies.REFUSED and "split for 9 rows" in rep["reason"] and len(slurm["argv"]) == 1
