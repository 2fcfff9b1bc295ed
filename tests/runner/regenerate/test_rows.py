"""The regeneration's pure parts: a row's turns read in its own spelling and rebuilt with the
target's answers, the thinking kept or cut, the commit log's whole lines, the config's checks."""

from __future__ import annotations

import json
import os

import pytest

from runner.contract.config import ConfigError, from_dict
from runner.contract.errors import StatusError
from runner.contract.regenerate import RegenerateRecord
from runner.data.dataset import RowError, parse_row
from runner.regenerate import committed, rows


def test_a_row_is_rebuilt_in_its_own_spelling_with_every_other_key_kept():
    row = {"id": 7, "source": "x", "conversations": [
        {"role": "system", "content": "be short"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "old", "reasoning_content": "theirs", "weight": 1},
        {"role": "user", "content": "and?"}, {"role": "assistant", "content": "old too"}]}  # fmt: skip
    t = rows.read(row)
    assert t.answers == [2, 4] and not t.appended
    new = rows.rebuild(t, ["one", "two"])
    assert new["id"] == 7 and new["source"] == "x"
    assert new["conversations"][2] == {"role": "assistant", "content": "one", "weight": 1}
    assert new["conversations"][4]["content"] == "two"
    assert row["conversations"][2]["content"] == "old"  # the input row untouched


def test_a_sharegpt_row_ending_with_a_question_gets_the_answer_appended():
    t = rows.read({"conversations": [{"from": "human", "value": "q"}]})
    assert t.appended and t.answers == [1]
    assert rows.rebuild(t, ["a"])["conversations"] == [
        {"from": "human", "value": "q"},
        {"from": "gpt", "value": "a"},
    ]


@pytest.mark.parametrize(
    "row,why",
    [
        ({"conversations": []}, "no conversation"),
        ({"text": "x"}, "no conversation"),
        ({"conversations": [{"role": "system", "content": "s"}]}, "no user turn"),
        ({"conversations": [{"role": "assistant", "content": "a"}]}, "before any user turn"),
        ({"conversations": [{"role": "tool", "content": "a"}]}, "bad turn"),
        ({"conversations": [{"role": "user", "content": 3}]}, "bad turn"),
        ({"conversations": ["hi"]}, "must be an object"),
    ],
)
def test_a_row_that_cannot_be_regenerated_says_why(row, why):
    with pytest.raises(RowError, match=why):
        rows.read(row)


def test_the_thinking_is_kept_or_cut_at_its_end():
    text = "<think>\nlet me see\n</think>\n\nThe answer."
    assert rows.reasoning(text, "keep") == text
    assert rows.reasoning(text, "drop") == "The answer."
    assert rows.reasoning("let me see</think>The answer.", "drop") == "The answer."  # the prompt opened it
    assert rows.reasoning("No thinking here.", "drop") == "No thinking here."


def test_the_commit_log_keeps_the_first_whole_line_of_each_row(tmp_path):
    path = str(tmp_path / "rows.jsonl")
    committed.append(path, {"row": 0, "data": {"a": 1}, "tokens": 3})
    committed.append(path, {"row": 2, "reason": "bad JSON"})
    committed.append(path, {"row": 0, "data": {"a": 2}, "tokens": 3})  # a second line: the first wins
    committed.append(path, {"row": 9, "data": {}, "tokens": 1})  # past the input: not a row
    with open(path, "ab") as f:
        f.write(b'{"row": 1, "data": {"a"')  # killed mid-write
    done = committed.read(path, 3)
    assert sorted(done) == [0, 2] and done[0]["data"] == {"a": 1}
    committed.append(path, {"row": 1, "data": {"b": 1}, "tokens": 2})  # the torn line was cut first
    assert sorted(committed.read(path, 3)) == [0, 1, 2]
    out, fails, meta = (str(tmp_path / n) for n in ("o.jsonl", "o.failed.jsonl", "o.meta.json"))
    committed.write_output(committed.read(path, 3), 3, out, fails, meta, {"reasoning": "keep"})
    assert open(out).read() == '{"a": 1}\n{"b": 1}\n'
    assert [json.loads(x) for x in open(fails)] == [{"row": 2, "id": None, "reason": "bad JSON"}]


@pytest.mark.parametrize(
    "line,why",
    [(b'{"a": NaN}', "NaN is not a JSON number"), (b'{"a": [1, -Infinity]}', "-Infinity is not a JSON number"),
     (b'{"id": "\\udc80"}', "lone surrogate (\\udc80)"), ('{"x": "ok \\ud800 no"}', "lone surrogate (\\ud800)")],
)  # fmt: skip
def test_the_one_row_parser_refuses_what_cannot_be_written_back_by_name(line, why):
    with pytest.raises(RowError, match=why.replace("(", r"\(").replace(")", r"\)").replace("\\u", r"\\u")):
        parse_row(line)
    assert parse_row(b'{"x": "\\u00e9 \\ud83d\\ude00", "id": 123456789012345678901234567890}') == {
        "x": "\u00e9 \U0001f600",
        "id": 123456789012345678901234567890,
    }  # a surrogate pair is a character; a big integer stays an integer


def test_a_commit_that_cannot_be_written_is_the_rows_failure_and_a_big_id_reads_back_whole(tmp_path):
    path = str(tmp_path / "rows.jsonl")
    entry = {"row": 0, "id": None, "data": {"a": "\udc80"}, "tokens": 3}  # a server's answer, say
    committed.append(path, entry)
    assert entry["reason"].startswith("its answer cannot be written as JSON") and "data" not in entry
    committed.append(path, {"row": 1, "id": 10**29, "data": {"id": 10**29}, "tokens": 1})
    done = committed.read(path, 2)
    assert sorted(done) == [0, 1] and done.failed == 1
    assert done[1]["data"]["id"] == 10**29 and isinstance(done[1]["data"]["id"], int)


def test_the_config_refuses_what_cannot_be_sampled():
    assert from_dict({"regenerate": {"reasoning": "drop", "top_k": 20}}).regenerate.top_k == 20
    for bad in (
        {"reasoning": "maybe"},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"max_new_tokens": 0},
        {"top_k": -1},
    ):
        with pytest.raises(ConfigError, match=r"\[regenerate\]"):
            from_dict({"regenerate": bad})


def test_the_record_refuses_a_negative_count_by_name():
    with pytest.raises(StatusError, match="'failed' is negative"):
        RegenerateRecord.from_dict({"phase": "done", "failed": -1})


def test_a_launch_under_way_is_not_a_crash_but_one_that_never_claimed_is(tmp_path):
    """A status asked between the launch's preflight and its supervisor's claim of the lock: while
    the launch holds the launch lock, preflight; once it has let go with no supervisor holding
    the run, crashed, however fresh the record."""
    from runner.job import supervised
    from runner.regenerate import record

    rec = record.load(str(tmp_path))
    rec.update(phase="preflight", pid=None)
    rec.write()
    with supervised.one_launch(str(tmp_path)):
        assert record.KIND.read(str(tmp_path)).phase == "preflight"
        assert supervised.launching(str(tmp_path))
    assert not supervised.launching(str(tmp_path))
    assert record.KIND.read(str(tmp_path)).phase == "crashed"
    rec.update(pid=12345)  # claimed, then gone: a crash at once
    rec.write()
    assert record.KIND.read(str(tmp_path)).phase == "crashed"


def test_one_row_not_regenerated_is_said_in_the_singular():
    from runner.text.regenerate import line, render_regenerate

    rec = RegenerateRecord(phase="done", started_at="2026-12-05T00:00:00Z", done=3, total=3, failed=1)
    assert "1 row not regenerated, each listed with its reason" in render_regenerate(rec)
    said = render_regenerate(RegenerateRecord(phase="regenerating", done=3, total=9, cut=2))
    assert "2 rows kept with an answer cut at its token limit ([regenerate] max_new_tokens" in said
    assert "cut at" not in render_regenerate(rec)  # none cut: nothing said
    assert (
        line(RegenerateRecord(phase="done", done=9, total=9, cut=2))
        == "done · 9/9 rows · 2 cut at the token limit"
    )
    with pytest.raises(StatusError, match="'cut' is negative"):
        RegenerateRecord.from_dict({"phase": "done", "cut": -1})


def test_the_commit_log_is_read_and_written_out_without_holding_its_conversations(tmp_path):
    """Millions of whole conversations are committed over a run: reading the log back on a
    resume and writing the output at the end keep where each row's line is, not the row."""
    import tracemalloc

    path, n, answer = str(tmp_path / "rows.jsonl"), 4000, "x" * 4000
    order = [i ^ 1 for i in range(n)]  # committed out of input order, as rows in flight end
    with open(path, "w") as f:
        for i in order:
            e = {"row": i, "id": i, "reason": "too long"} if i % 100 == 7 else {"row": i, "id": i, "data": {"a": f"{i}{answer}"}, "tokens": 5}  # fmt: skip
            f.write(json.dumps(e) + "\n")
    size = os.path.getsize(path)
    tracemalloc.start()
    try:
        done = committed.read(path, n)
        held = tracemalloc.get_traced_memory()[0]
        out, fails, meta = (str(tmp_path / x) for x in ("o.jsonl", "o.failed.jsonl", "o.meta.json"))
        tracemalloc.reset_peak()
        committed.write_output(done, n, out, fails, meta, {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert held < size / 100 and peak < size / 20, (held, peak, size)
    # the figures kept as the rows were read, as a recount gives them
    assert (len(done), done.failed, done.tokens) == (n, n // 100, 5 * (n - n // 100))
    assert done.last_failure == {"row": [i for i in order if i % 100 == 7][-1], "reason": "too long"}
    lines = open(out).read().splitlines()
    assert [json.loads(x)["a"][:4].rstrip("x") for x in lines] == [str(i) for i in range(n) if i % 100 != 7]
    assert [json.loads(x)["row"] for x in open(fails)] == [i for i in range(n) if i % 100 == 7]
