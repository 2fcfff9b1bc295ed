"""Input no parser should be trusted with: a hostile dataset row is a listed failure with its
reason, a file whose name only looks like a sample is no sample; never a job that dies on it
(and again on every resume)."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import runner
from tests.runner.helpers import out_dir, status, verify

pytestmark = pytest.mark.slow

CAP = 300_000  # [job] max_row_bytes for the test: above the deep row, below the long one


def hostile_rows() -> dict[str, str]:
    deep = "[" * 100_000 + "]" * 100_000
    return {
        "big integer": '{"input_ids": [' + "7" * 5000 + "]}\n",
        "deep nesting": '{"input_ids": ' + deep + "}\n",
        "oversized": json.dumps({"conversations": [{"role": "user", "content": "x" * (CAP + 1000)}]}) + "\n",
    }


def test_hostile_rows_fail_with_reasons_and_the_job_finishes(job, demo_assets):
    with open(os.path.join(demo_assets, "data.jsonl")) as f:
        good = f.readlines()[:6]
    bad = hostile_rows()
    # Bad rows first: the self-test picks its row from the first remaining ones.
    rows = list(bad.values()) + good[:3] + ['{"input_ids": [1, ' + "9" * 4400 + "]}\n"] + good[3:]
    conf = job(samples=None, rows=rows, job__max_row_bytes=CAP)
    runner("run", "--config", conf, check=True)
    st = status(conf)
    assert st["phase"] == "done" and st["done"] == 6 and st["failed"] == 4, st
    failed_path = os.path.join(out_dir(conf), "failed.jsonl")
    with open(failed_path) as f:
        failed = {json.loads(x)["idx"]: json.loads(x)["reason"] for x in f}
    assert sorted(failed) == [0, 1, 2, 6]
    assert "digits" in failed[0] and "digits" in failed[6]
    assert "nested too deeply" in failed[1]
    assert f"over the {CAP}-byte row limit" in failed[2]
    assert all(r.startswith("bad row:") for r in failed.values())

    # A resume plans nothing more: no new failure lines, nothing extracted.
    before = os.path.getsize(failed_path)
    runner("run", "--config", conf, check=True)
    st = status(conf)
    assert st["phase"] == "done" and st["done"] == 6 and st["done_this_run"] == 0
    assert os.path.getsize(failed_path) == before

    # Verify survives a committed sample whose row turned hostile since.
    rows[3] = bad["deep nesting"]
    with open(os.path.join(os.path.dirname(conf), "data.jsonl"), "w") as f:
        f.writelines(rows)
    code, rep = verify(conf)
    assert code == 1 and rep["corrupt"] == [3] and rep["failed"] == [0, 1, 2, 6]
    assert "unusable now" in rep["reasons"]["3"] and "nested too deeply" in rep["reasons"]["3"]


def test_names_with_unicode_digits_or_a_newline_are_no_samples_and_the_job_starts(job):
    conf = job(samples=8)
    shard = os.path.join(out_dir(conf), "rows_0-2000")
    os.makedirs(shard)
    foreign = [
        "data_\u0663.ckpt",
        "data_4.ckpt\n",
        "data_\uff15.ckpt.gz",
    ]  # Arabic-Indic 3, a newline, fullwidth 5
    for name in foreign:
        with open(os.path.join(shard, name), "wb") as f:
            f.write(b"not ours")
    runner("run", "--config", conf, check=True)
    st = status(conf)
    assert st["phase"] == "done" and st["done"] == 8 and st["done_this_run"] == 8, st
    assert all(open(os.path.join(shard, n), "rb").read() == b"not ours" for n in foreign)  # noqa: SIM115
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 8 and rep["unrecorded"] == [] and rep["corrupt"] == [], rep
