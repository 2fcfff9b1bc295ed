"""The disk projection per storage mode (runner/job/preflight.py projected_need): measured in the
job's own mode once it has samples there, scaled from the other mode's, else the worst case;
and what ckpt.gz or 4 mantissa bits would need instead."""

from __future__ import annotations

from runner.job.disk import TYPICAL_RATIO
from runner.job.preflight import projected_need
from runner.output.store import Store, shard_name


def _lines(out: str, n: int, nbytes: int, storage: str = "ckpt", start: int = 0) -> None:
    store = Store(out)
    for i in range(start, start + n):
        store.append_manifest(i, 100, nbytes, "0" * 16, shard_name(i), storage=storage)


def test_nothing_written_yet_projects_the_worst_case_and_names_the_smaller_modes(tmp_path):
    need, how = projected_need(str(tmp_path), 30, 1000)
    assert need == 30_000 and how.startswith("30 rows x 1.0 KB worst case")
    assert 'storage = "ckpt.gz": ~24.3 KB, and mantissa_bits = 4: ~18.6 KB (typical ratios)' in how


def test_raw_samples_measured_give_the_raw_need_and_the_alternatives_scaled_from_them(tmp_path):
    _lines(str(tmp_path), 10, 1000)
    need, how = projected_need(str(tmp_path), 30, 99_999)
    assert need == 20_000 and "20 rows x 1.0 KB measured (ckpt)" in how
    assert "~16.2 KB" in how and "~12.4 KB" in how


def test_a_job_switched_to_gzip_is_estimated_from_its_raw_samples_until_it_has_its_own(tmp_path):
    _lines(str(tmp_path), 10, 1000)
    need, how = projected_need(str(tmp_path), 30, 99_999, storage="ckpt.gz")
    assert need == int(20 * 1000 * TYPICAL_RATIO[("ckpt.gz", 7)]) and "estimated from 10 ckpt samples" in how
    _lines(str(tmp_path), 5, 700, storage="ckpt.gz", start=10)
    need, how = projected_need(str(tmp_path), 30, 99_999, storage="ckpt.gz")
    assert need == 15 * 700 and "measured (ckpt.gz)" in how
    assert 'ckpt.gz": ~' not in how and "and mantissa_bits = 4: ~" in how  # only what is smaller still


def test_the_smallest_mode_names_no_alternative(tmp_path):
    _lines(str(tmp_path), 4, 600, storage="ckpt.gz")
    need, how = projected_need(str(tmp_path), 10, 99_999, storage="ckpt.gz", bits=4)
    assert need == 6 * 600 and "typical ratios" not in how


def test_a_run_seeds_its_bytes_per_sample_from_files_of_its_own_mode(tmp_path):
    d = tmp_path / shard_name(0)
    d.mkdir()
    (d / "data_0.ckpt").write_bytes(b"x" * 1000)
    (d / "data_1.ckpt.gz").write_bytes(b"x" * 300)
    assert Store(str(tmp_path), storage="ckpt.gz").mean_bytes({0, 1}) == 300
    assert Store(str(tmp_path)).mean_bytes({0, 1}) == 1000
    assert Store(str(tmp_path), storage="ckpt.gz").mean_bytes({0}) is None  # none yet: the worst case
