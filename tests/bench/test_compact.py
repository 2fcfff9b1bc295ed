"""bench/compact.py at tiny sizes: the output it builds is a job's (compact takes it and gives
back the samples written), the raw files come back between rounds, and the report."""

from __future__ import annotations

import json

import pytest

from bench import compact as bc
from bench.storage import _same_bits, synthetic_sample
from runner.codec.ckpt import KEYS, load_sample
from runner.output.store import Store, sample_path

N, SEQ, H = 3, 16, 64


def test_the_built_output_is_compacted_to_the_samples_written(tmp_path):
    sums = bc.build(str(tmp_path), N, SEQ, H)
    out = str(tmp_path / "out")
    assert bc.files(out) == [sample_path(out, i) for i in range(N)]
    assert sorted(Store(out).manifest()) == list(range(N))
    wall, cpu, rep = bc.run_compact(bc.config(str(tmp_path), SEQ, storage="ckpt.gz"), N)
    assert wall > 0 and cpu >= 0 and rep["freed"] > 0
    assert bc.files(out) == [sample_path(out, i, "ckpt.gz") for i in range(N)]
    for i in range(N):
        got, want = load_sample(sample_path(out, i, "ckpt.gz")), synthetic_sample(SEQ, H, seed=i)
        assert all(_same_bits(got[k], want[k]) for k in KEYS), i
    bc.restore(str(tmp_path), SEQ, N, sums)
    assert bc.files(out) == [sample_path(out, i) for i in range(N)]


def test_restore_refuses_files_that_are_not_the_first_builds(tmp_path):
    sums = bc.build(str(tmp_path), N, SEQ, H)
    bc.run_compact(bc.config(str(tmp_path), SEQ, storage="ckpt.gz"), N)
    with pytest.raises(RuntimeError, match="did not give the raw files back"):
        bc.restore(str(tmp_path), SEQ, N, {**sums, 1: "0" * 16})


def test_main_prints_a_table_and_one_json_line_against_cat(tmp_path, capsys):
    argv = [
        "--dir",
        str(tmp_path),
        "--samples",
        str(N),
        "--seq",
        str(SEQ),
        "--hidden",
        str(H),
        "--repeats",
        "2",
    ]
    assert bc.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("{") for line in out) == 1
    report = json.loads(out[-1])
    rows = report["methods"]
    assert list(rows) == ["cat", "ckpt.gz", "ckpt.gz, 4 mantissa bits"]
    assert [r["runs"] for r in rows.values()] == [2, 2, 1]
    assert rows["cat"]["vs_cat"] == 1.0 and rows["cat"]["freed"] == 0
    raw = report["raw_bytes"]
    for name in ("ckpt.gz", "ckpt.gz, 4 mantissa bits"):
        r = rows[name]
        assert r["mb_s"] > 0 and r["vs_cat"] == pytest.approx(r["mb_s"] / rows["cat"]["mb_s"])
        assert r["freed"] == raw - r["bytes_after"] > 0
        assert sum(line.startswith(f"compact to {name} ") for line in out) == 1
    assert rows["ckpt.gz, 4 mantissa bits"]["freed"] > rows["ckpt.gz"]["freed"]
    assert "page cache not dropped" in out[0]
    assert report["torch_threads"] >= 1 and report["workers"] >= 1
    assert list(tmp_path.iterdir()) == []  # cleaned up
