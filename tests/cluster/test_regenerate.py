"""The regeneration on the Slurm engine, against a real single-node Slurm: its ranks as one sbatch
array, each with its own server and its own committed rows; stop is scancel; one rank's
supervisor killed with SIGKILL mid-way, then resumed alone: the one output equals a one-box run's
byte for byte (greedy, the reference backend), every row committed exactly once, in input order."""

from __future__ import annotations

import json
import os
import signal

import pytest

from runner.data.demo_assets import PACE_ENV
from runner.output.lock import is_held_at
from tests.cluster.conftest import cluster_job
from tests.runner.helpers import runner_json, wait_for

pytestmark = pytest.mark.slow  # ranks and a one-box supervisor, each with a server importing torch

ROWS = 30
SHARE = ROWS // 2  # two ranks: rows 0..14 and 15..29
ENDED = ("done", "failed", "stopped", "crashed")


def _config(tmp_path, name: str, assets, **cluster) -> str:
    """The demo's first ROWS conversations, answers of 12 tokens, one row in flight per server."""
    return cluster_job(tmp_path / name, assets, samples=ROWS, job__max_length=512,
                       regenerate__max_new_tokens=12, regenerate__concurrency=1, **cluster)  # fmt: skip


def _regen(conf: str, action: str, *extra) -> tuple[int, dict]:
    return runner_json("regenerate", conf, action, *extra)


def _status(conf: str) -> dict:
    code, d = _regen(conf, "status")
    assert code == 0, d
    return d


def _ended(conf: str, what: str, timeout: float = 300.0) -> dict:
    return wait_for(lambda: (s := _status(conf))["phase"] in ENDED and s, timeout, 0.2, what)


def _lines(root: str, rank: int | None) -> list[dict]:
    """A rank's committed rows (rows.rankR.jsonl; the one box's rows.jsonl), a torn last line left out."""
    name = "rows.jsonl" if rank is None else f"rows.rank{rank}.jsonl"
    out = []
    try:
        with open(os.path.join(root, name), "rb") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return out


def _record(root: str, rank: int) -> dict:
    try:
        with open(os.path.join(root, f"status.rank{rank}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_two_ranks_stopped_then_one_killed_and_resumed_end_as_a_one_box_run(
    slurm, demo_assets, tmp_path, monkeypatch
):
    one = _config(tmp_path, "one", demo_assets, engine="local")
    code, d = _regen(one, "start")
    assert code == 0 and d["started"], d
    truth = _ended(one, "the one-box run's end")
    assert truth["phase"] == "done" and truth["total"] == ROWS, truth

    # each answer no sooner than 0.5 s after its request: a rank's 15 rows take many seconds,
    # so rank 1 is still mid-way when it is killed right after its second commit
    monkeypatch.setenv(PACE_ENV, "0.5")
    conf = _config(tmp_path, "array", demo_assets, ranks=2)
    code, rep = _regen(conf, "start")
    assert code == 0 and rep["ranks"] == [0, 1] and rep["world"] == 2, rep
    assert any(a.startswith("--array=0,1") for a in rep["argv"]), rep["argv"]
    root = rep["run_dir"]
    code, again = _regen(conf, "start")
    assert code == 3, again  # a second start never submits the ranks twice

    # stop is scancel: both ranks end stopped, nothing is written
    wait_for(lambda: all(_record(root, r).get("phase") in ("starting_server", "regenerating") for r in (0, 1)),
             300, 0.1, "both ranks starting their servers")  # fmt: skip
    code, rep = _regen(conf, "stop", "--wait", "60")
    assert code == 0 and rep["stopped"], rep
    st = _status(conf)
    assert st["phase"] == "stopped" and [r["state"] for r in st["ranks"]] == ["stopped", "stopped"], st
    assert st["restarts"] == 0, st["last_death"]  # scancel ends each server with its rank: no death
    assert not os.path.exists(st["output"])

    code, rep = _regen(conf, "resume")
    assert code == 0 and rep["ranks"] == [0, 1], rep
    wait_for(lambda: len(_lines(root, 1)) >= 2, 300, 0.02, "rank 1 committing rows")
    held, pid = is_held_at(os.path.join(root, ".lock.rank1"))
    assert held and pid, "rank 1's supervisor holds its lock"
    os.kill(pid, signal.SIGKILL)  # as a fault would: its row in flight wherever it was
    killed_at = len(_lines(root, 1))
    assert killed_at < SHARE, "rank 1 was killed mid-way"

    st = wait_for(lambda: (s := _status(conf))["phase"] == "failed" and s, 300, 0.2,
                  "rank 0 done and rank 1's death merged")  # fmt: skip
    assert [r["state"] for r in st["ranks"]] == ["done", "failed"], st["ranks"]
    assert st["reason"].startswith("rank 1 FAILED"), st["reason"]
    assert SHARE <= st["done"] < ROWS and st["total"] == ROWS, st
    assert not os.path.exists(st["output"])  # written whole at the end, never before
    rank0 = _record(root, 0)["started_at"]

    code, rep = _regen(conf, "resume")
    assert code == 0 and rep["ranks"] == [1], rep  # only what is missing
    end = _ended(conf, "rank 1 resumed to the end")
    assert end["phase"] == "done", end
    assert (end["done"], end["total"], end["failed"]) == (ROWS, ROWS, truth["failed"]), end
    assert _record(root, 0)["started_at"] == rank0  # the finished rank untouched

    ranks = [[e["row"] for e in _lines(root, r)] for r in (0, 1)]
    assert sorted(ranks[0]) == list(range(SHARE)) and sorted(ranks[1]) == list(range(SHARE, ROWS))
    assert len(ranks[0]) + len(ranks[1]) == ROWS  # each row committed exactly once
    assert _read(end["output"]) == _read(truth["output"])  # byte for byte, in input order
    assert _read(end["failures"]) == _read(truth["failures"])
    assert len(_read(end["output"]).splitlines()) == ROWS - truth["failed"]
    code, rep = _regen(conf, "resume")
    assert code == 3 and "done" in rep["reason"], rep
