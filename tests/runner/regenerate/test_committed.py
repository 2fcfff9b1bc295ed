"""The regeneration's commit files on Slurm, without a server: each rank's rows.rankR.jsonl read
within its own range, the first line of a row its answer; the one output written only once every
rank says done, never with a row missing, and the same bytes however many processes write it."""

from __future__ import annotations

import json
import os
import threading

import pytest

from runner.contract.config import from_dict
from runner.output.ranks import even
from runner.regenerate import committed, control, record

ROWS = 10
RANGES = even(ROWS, 2)  # rows 0..4 and 5..9


def _cfg(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"conversations": [{"role": "user", "content": f"q{i}"}]}) + "\n"
                            for i in range(ROWS)))  # fmt: skip
    d = {"job": {"name": "t", "model": "m", "dataset": str(data), "out": str(tmp_path / "out")},
         "regenerate": {"max_new_tokens": 8}}  # fmt: skip
    return from_dict(d, base_dir=str(tmp_path))


def _row(i: int, answer: str = "") -> dict:
    conv = [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": answer or f"a{i}"}]
    return {"row": i, "id": i, "data": {"conversations": conv}, "tokens": 3}


def _commit(root: str, rank: int, entries: list[dict], done: bool = True) -> None:
    for e in entries:
        committed.append(os.path.join(root, f"rows.rank{rank}.jsonl"), e)
    rec = record.load(root, rank)
    rec.update(phase="done" if done else "regenerating", done=len(entries), total=5)
    rec.write()


def test_a_ranks_rows_are_its_own_range_and_a_rows_first_line_is_its_answer(tmp_path):
    root = str(tmp_path)
    _commit(root, 0, [_row(0), _row(1), _row(1, "again"), _row(7, "not rank 0's"), _row(2), _row(3), _row(4)])
    _commit(root, 1, [_row(5), {"row": 6, "id": 6, "reason": "too long"}, _row(7), _row(8), _row(9)])
    with open(os.path.join(root, "rows.rank1.jsonl"), "ab") as f:
        f.write(b'{"row": 9, "data": {"conver')  # torn: a writer killed mid-line
    size = os.path.getsize(os.path.join(root, "rows.rank1.jsonl"))
    done = committed.read_ranks(root, RANGES)
    assert sorted(done) == list(range(ROWS))
    assert (
        done[1]["data"]["conversations"][1]["content"] == "a1"
        and done[7]["data"]["conversations"][1]["content"] == "a7"
    )
    assert done[6] == {"row": 6, "id": 6, "reason": "too long"}
    assert os.path.getsize(os.path.join(root, "rows.rank1.jsonl")) == size  # another rank's file is never cut


def test_the_output_waits_for_every_rank_then_is_written_in_input_order(tmp_path):
    cfg, root = _cfg(tmp_path), str(tmp_path / "run")
    os.makedirs(root)
    _commit(root, 1, [_row(i) for i in (8, 5, 9, 7)] + [{"row": 6, "id": 6, "reason": "too long"}])
    _commit(root, 0, [_row(i) for i in (2, 0)], done=False)  # rank 0 still at work
    assert not committed.finish_ranks(cfg, root, control.source(cfg), ROWS, RANGES)
    assert not os.path.exists(control.output(cfg))
    _commit(root, 0, [_row(i) for i in (1, 4, 3)])
    assert committed.finish_ranks(cfg, root, control.source(cfg), ROWS, RANGES)
    lines = [json.loads(x) for x in open(control.output(cfg))]
    assert [r["conversations"][0]["content"] for r in lines] == [f"q{i}" for i in range(ROWS) if i != 6]
    assert [json.loads(x)["row"] for x in open(control.failures(cfg))] == [6]
    meta = json.load(open(control.meta(cfg)))
    assert (meta["rows"], meta["regenerated"], meta["not_regenerated"]) == (ROWS, 9, 1)


def test_a_row_without_a_commit_is_never_written_as_a_shorter_dataset(tmp_path):
    cfg, root = _cfg(tmp_path), str(tmp_path / "run")
    os.makedirs(root)
    _commit(root, 0, [_row(i) for i in range(5)])
    _commit(root, 1, [_row(i) for i in (5, 6, 8, 9)])  # a record that says done, row 7 missing
    with pytest.raises(RuntimeError, match="1 row\\(s\\) not committed \\(the first: 7\\)"):
        committed.finish_ranks(cfg, root, control.source(cfg), ROWS, RANGES)
    assert not os.path.exists(control.output(cfg)) and not os.path.exists(control.failures(cfg))


def test_two_ranks_writing_the_output_at_once_leave_one_whole_file(tmp_path):
    """Two ranks ending together may both see every rank done: each writes the same bytes
    through its own temporary file, replaced whole, so the file is one writer's, whole."""
    cfg, root = _cfg(tmp_path), str(tmp_path / "run")
    os.makedirs(root)
    _commit(root, 0, [_row(i, "x" * 20_000) for i in range(5)])
    _commit(root, 1, [_row(i, "y" * 20_000) for i in range(5, ROWS)])
    committed.finish_ranks(cfg, root, control.source(cfg), ROWS, RANGES)
    first = open(control.output(cfg), "rb").read()
    os.unlink(control.output(cfg))
    errors = []

    def write():
        try:
            for _ in range(5):
                assert committed.finish_ranks(cfg, root, control.source(cfg), ROWS, RANGES)
        except BaseException as e:  # noqa: BLE001 - said below
            errors.append(e)

    writers = [threading.Thread(target=write) for _ in range(3)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    assert not errors, errors
    assert open(control.output(cfg), "rb").read() == first and len(first.splitlines()) == ROWS
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]  # no writer's temporary left
