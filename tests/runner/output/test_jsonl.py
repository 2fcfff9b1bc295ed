"""The line files' torn tail: cut back to the last whole line, however long the torn one is (a
regenerated row is a whole conversation, often past one 64 KiB read)."""

from __future__ import annotations

import pytest

from runner.output import jsonl

WHOLE = b'{"row":0,"data":"a"}\n' + b'{"row":1,"data":"' + b"b" * 100_000 + b'"}\n'


@pytest.mark.parametrize("torn", [1, 65_534, 65_535, 65_536, 70_000, 200_000])
def test_a_torn_last_line_is_cut_and_the_whole_lines_before_it_kept(tmp_path, torn):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(WHOLE + b'{"row":2,"data":"' + b"c" * torn)
    jsonl.repair_tail(str(path))
    assert path.read_bytes() == WHOLE
    assert [e["row"] for e in jsonl.read(str(path))] == [0, 1]


def test_a_whole_file_is_untouched_and_a_lone_torn_line_goes(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(WHOLE)
    jsonl.repair_tail(str(path))
    assert path.read_bytes() == WHOLE
    path.write_bytes(b'{"row":0,"data":"' + b"x" * 150_000)
    jsonl.repair_tail(str(path))
    assert path.read_bytes() == b""
    jsonl.repair_tail(str(tmp_path / "absent.jsonl"))  # nothing to cut
