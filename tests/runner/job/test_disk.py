"""Disk exhaustion, the seeds' root cause: on a small filesystem the runner pauses before it
runs out, leaves no partial file, and continues once space is back."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import runner
from tests.runner.helpers import done_count, out_dir, start_run, status, verify, wait_for


@pytest.fixture
def small_fs(tmp_path):
    mounted = []

    def mount(path, size):
        os.makedirs(path, exist_ok=True)
        p = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        )
        if p.returncode != 0:
            pytest.fail(f"cannot mount a tmpfs (tests run as root): {p.stderr.decode()}")
        mounted.append(str(path))

    yield mount
    for m in mounted:
        subprocess.run(["umount", "-l", m], capture_output=True)


@pytest.mark.slow
def test_pauses_before_the_disk_is_full_and_resumes_when_space_returns(job, small_fs):
    conf = job(samples=80, job__disk_recheck_s=600.0)  # only resume's wake-up ends the pause
    out = out_dir(conf)
    small_fs(out, "3M")
    p = start_run(conf)
    try:
        wait_for(lambda: status(conf)["phase"] == "paused", timeout=120, every=0.2, what="pause")
        st = status(conf)
        assert st["reason"].startswith("disk low:") and "reserve" in st["reason"]
        assert st["disk"]["need"] and st["disk"]["need"] > st["disk"]["free"]
        assert st["errors_this_run"] == 0  # paused before any write failed
        assert 0 < st["done"] < 80 and p.poll() is None
        _, rep = verify(conf, "--quick")
        assert rep["corrupt"] == []  # nothing partial under a final name
        with open(os.path.join(out, "events.jsonl")) as f:
            assert sum(json.loads(x)["event"] == "disk_low" for x in f) == 1
        # the pause says what compacting would free; the operator compacts beside the paused runner
        # (counted as it paused: the requests then in flight committed after)
        said = re.search(r"compacting the (\d+) raw samples would free ~[0-9.]+ KB", st["reason"])
        assert said and 0 < int(said.group(1)) <= st["done"], st["reason"]
        with open(conf) as f:
            text = f.read()
        with open(conf, "w") as f:
            f.write(text.replace("[job]\n", '[job]\nstorage = "ckpt.gz"\n', 1))
        free = shutil.disk_usage(out).free
        r = runner("compact", "--json", "--config", conf)
        rep = json.loads(r.stdout)
        # every sample there (the ones in flight at the pause committed since)
        assert r.returncode == 0 and rep["recoded"] == rep["files"] >= st["done"] and rep["freed"] > 0, rep
        assert shutil.disk_usage(out).free - free >= rep["freed"] * 0.9  # the room is really there
        assert p.poll() is None and status(conf)["phase"] == "paused"
        subprocess.run(["mount", "-o", "remount,size=64M", out], check=True)
        r = runner("resume", "--json", "--config", conf)
        assert r.returncode == 0 and json.loads(r.stdout)["woken"]
        assert p.wait(120) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert status(conf)["phase"] == "done" and done_count(conf) == 80
    assert verify(conf)[0] == 0


def test_the_guard_pauses_below_the_reserve_once_and_resumes_above_it(tmp_path):
    from runner.contract.status import Phase
    from runner.job.disk import DiskGuard, fmt, worst_case_bytes
    from runner.job.record import Recorder
    from runner.output.ranks import RunPaths

    out = str(tmp_path)
    rec = Recorder(RunPaths(out), "t", 10, 30.0)
    rec.phase(Phase.EXTRACTING)
    worst = worst_case_bytes(256, 64)
    assert worst == 256 * (4 * 64 * 2 + 16) + 4096
    free = shutil.disk_usage(out).free
    guard = DiskGuard(out, rec, free + 10**12, 2, worst)  # more than the disk has
    assert guard.reserve() == free + 10**12 + 2 * 2 * worst  # no sample measured yet: the worst case
    assert not guard.ok() and not guard.ok()
    assert rec.record.phase == Phase.PAUSED
    assert rec.record.reason == f"disk low: free space at {out} is below the {fmt(guard.reserve())} reserve"
    guard.min_free = 0
    assert guard.ok() and rec.record.phase == Phase.EXTRACTING
    with open(os.path.join(out, "events.jsonl")) as f:
        kinds = [json.loads(x)["event"] for x in f]
    assert kinds.count("disk_low") == 1 and kinds.count("disk_ok") == 1  # one alert per pause
    assert (fmt(999), fmt(1500), fmt(2.5e12)) == ("999 B", "1.5 KB", "2.5 TB")


def test_the_compact_hint_counts_the_raw_samples_at_the_typical_ratio(tmp_path):
    from runner.job.disk import TYPICAL_RATIO, compact_hint, fmt
    from runner.output.store import Store

    out = str(tmp_path)
    assert compact_hint(out, "ckpt") == ""  # nothing written yet
    store = Store(out)
    for idx in range(3):
        store.append_manifest(idx, 10, 1_000_000, "c", "rows_0-2000")
    store.append_manifest(3, 10, 800_000, "c", "rows_0-2000", storage="ckpt.gz")
    store.append_manifest(0, 10, 800_000, "c", "rows_0-2000", storage="ckpt.gz")  # compacted since
    gain = fmt(2_000_000 * (1 - TYPICAL_RATIO[("ckpt.gz", 7)]))
    assert compact_hint(out, "ckpt") == (
        f'; compacting the 2 raw samples would free ~{gain} ([job] storage = "ckpt.gz", then /extract compact)'
    )
    assert compact_hint(out, "ckpt.gz").endswith("(/extract compact)")
