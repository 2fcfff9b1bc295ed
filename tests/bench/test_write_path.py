"""bench/write_path.py at tiny sizes: every row, the ckpt.gz rows' bytes on disk, the report."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from bench import write_path as wp

pytestmark = pytest.mark.skipif(shutil.which("dd") is None, reason="needs dd")
TINY = ["--seq", "16", "--hidden", "64", "--repeats", "1"]


def run(tmp_path, capsys, *extra) -> tuple[list[str], dict]:
    threads = torch.get_num_threads()
    assert wp.main(["--dir", str(tmp_path), *TINY, *extra]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("{") for line in out) == 1
    assert list(tmp_path.iterdir()) == []  # cleaned up
    assert torch.get_num_threads() == threads  # given back
    return out[:-1], json.loads(out[-1])


def test_every_row_is_measured_against_dd_with_its_bytes_on_disk(tmp_path, capsys):
    table, report = run(tmp_path, capsys)
    rows = report["methods"]
    assert {"write_sample", wp.GZ, wp.GZ4} <= set(rows) and "torch.save" in rows
    assert report["threads"] == 1
    raw = report["sample_bytes"]
    assert rows["write_sample"]["bytes_on_disk"] == raw and rows["write_sample"]["smaller_by"] == 1.0
    # the synthetic heavy-tailed states compress, and rounding to 4 bits more so
    assert raw > rows[wp.GZ]["bytes_on_disk"] > rows[wp.GZ4]["bytes_on_disk"]
    assert rows[wp.GZ4]["smaller_by"] > rows[wp.GZ]["smaller_by"] > 1.1
    for name, r in rows.items():
        assert r["mb_s"] > 0 and (r["mb_per_cpu_s"] is None or r["mb_per_cpu_s"] > 0), name
        assert sum(line.startswith(f"{name} + fsync") for line in table) == 1, name
        if report["dd_mb_s"] is not None:
            assert r["vs_dd"] == pytest.approx(r["mb_s"] / report["dd_mb_s"])
    assert any(line.startswith("dd oflag=direct") for line in table) == (report["dd_mb_s"] is not None)


def test_other_dtypes_have_no_mantissa_row(tmp_path, capsys):
    _, report = run(tmp_path, capsys, "--dtype", "fp16")
    assert wp.GZ in report["methods"] and wp.GZ4 not in report["methods"]


def test_the_gzip_check_fails_on_bytes_that_are_not_write_samples(tmp_path):
    sample = wp.make_sample(8, 32, wp.DTYPES["bf16"])
    with pytest.raises(RuntimeError, match="does not gunzip to write_sample's bytes"):
        wp.check_gz(sample, str(tmp_path / "s.ckpt"), "0" * 16)
    assert list(tmp_path.iterdir()) == []
