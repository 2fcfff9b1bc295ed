"""The one tolerant reader of hsx's JSON files (a status or state file, and the line files: the
runner's events, the training's history, the watcher's points): whatever a line or a file holds,
it is passed over, never raised; the rest is read."""

from __future__ import annotations

import json

import pytest

from runner.contract.atomic import read_jsonl, read_object

BAD = [
    b'{"done": ' + b"9" * 5000 + b"}",  # past Python's int digits: ValueError, not JSONDecodeError
    b"[" * 100_000 + b"]" * 100_000,  # deep: RecursionError
    b'{"done": 2, "t": "\xff\xfe"}',  # not UTF-8
    b"not json",
    b"[1, 2]",  # JSON, not an object
]
GOOD = [{"event": "progress", "t": "2026-12-03T00:00:00Z", "done": 1}, {"event": "progress", "done": 2}]


def _file(tmp_path, torn=True):
    p = tmp_path / "events.jsonl"
    lines = [json.dumps(GOOD[0]).encode(), *BAD, json.dumps(GOOD[1]).encode()]
    p.write_bytes(b"\n".join(lines) + b"\n" + (b'{"event": "prog' if torn else b""))
    return p


def test_read_jsonl_passes_over_every_bad_line_and_keeps_the_rest(tmp_path):
    p = _file(tmp_path)
    assert read_jsonl(str(p)) == GOOD
    assert read_jsonl(str(p), last=2) == [GOOD[1]]  # the last lines only (the torn one among them)
    assert read_jsonl(str(tmp_path / "absent.jsonl")) == []
    assert read_jsonl(str(p), max_line=10) == []  # every line past the bound is passed over


@pytest.mark.parametrize("block", [7, 64, 1 << 16])
def test_the_last_lines_are_read_from_the_end_whatever_the_blocks(tmp_path, block):
    """A status polled every few seconds asks a history's last 500 points: read from its end, the
    same lines as the whole file's last ones, a line cut by a block boundary read whole."""
    import io

    from runner.contract.atomic import _tail

    lines = [json.dumps({"t": i, "pad": "x" * (i % 13)}).encode() for i in range(300)]
    whole = b"\n".join(lines) + b"\n"
    for last in (1, 5, 299, 300, 1000):
        assert _tail(io.BytesIO(whole), last, block) == lines[-last:], last
    assert _tail(io.BytesIO(whole + b'{"t": 3'), 2, block) == [lines[-1], b'{"t": 3']  # a torn end
    p = tmp_path / "history.jsonl"
    p.write_bytes(whole)
    assert read_jsonl(str(p), last=3) == [json.loads(x) for x in lines[-3:]]


@pytest.mark.parametrize("bad", BAD)
def test_read_object_of_a_broken_file_is_none(tmp_path, bad):
    p = tmp_path / "status.json"
    p.write_bytes(bad)
    assert read_object(str(p)) is None
