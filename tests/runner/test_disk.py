"""Disk exhaustion, the seeds' root cause: on a small filesystem the runner pauses before it
runs out, leaves no partial file, and continues once space is back."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import runner
from tests.runner.helpers import done_count, out_dir, start_run, status, verify, wait_for

pytestmark = pytest.mark.slow  # a real runner process (torch) on a small tmpfs


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
