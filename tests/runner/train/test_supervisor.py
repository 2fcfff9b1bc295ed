"""The supervisor and its record (runner/train/supervisor.py, record.py): the crash rule, the crash reason, an output taken since the check."""

from __future__ import annotations

import os
import subprocess
import sys

from runner.output.lock import JobLock
from runner.train import record


def test_an_active_record_whose_supervisor_is_gone_reads_crashed(tmp_path):
    rec = record.Record(str(tmp_path), {"phase": "training", "step": 4})
    rec.write()
    lock = JobLock(str(tmp_path / ".lock"))
    lock.acquire()
    assert record.read(str(tmp_path))["phase"] == "training"
    lock.release()
    got = record.read(str(tmp_path))
    assert got["phase"] == "crashed" and "supervisor is gone" in got["reason"] and got["step"] == 4
    assert record.read(str(tmp_path / "nowhere"))["phase"] == "stopped"


def test_the_crash_reason_is_the_tracebacks_exception_with_what_it_prints_below(tmp_path):
    from runner.train.supervisor import last_error

    log = tmp_path / "train.log"
    log.write_text(
        'an earlier launch\nTraceback (most recent call last):\n  File "a.py", line 1\nOldError: gone\n'
        "step 2: {'loss': 1.0}\nTraceback (most recent call last):\n  File \"cli.py\", line 9, in main\n"
        "    cfg = load()\n           ^^^^\npydantic_core.ValidationError: 1 validation error for Config\n"
        "training.no_such_key\n  Extra inputs are not permitted [type=extra_forbidden]\n"
    )
    start = len("an earlier launch\n")
    want = (
        "pydantic_core.ValidationError: 1 validation error for Config training.no_such_key "
        "Extra inputs are not permitted [type=extra_forbidden]"
    )
    assert last_error(str(log), start) == want
    log.write_text("loading\nKilled\n")
    assert last_error(str(log), 0) == "Killed"


def test_a_supervisor_whose_output_was_taken_since_the_check_refuses_and_says_who(tmp_path):
    from runner.train import supervisor

    out, root = tmp_path / "out", tmp_path / "run"
    code = (
        f"from runner.train import exclusive\nwith exclusive.using({str(out)!r}, 'verify --repair'):\n"
        "    print(1, flush=True); import time; time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"1"
        os.makedirs(root)
        rec = record.Record(str(root), {"phase": "preflight", "features": str(out)})
        rec.write()
        assert supervisor.main([str(root)]) == 3
        d = record.read(str(root))
        assert d["phase"] == "stopped" and d["reason"].startswith(
            f"verify --repair (pid {holder.pid}) runs on {out}"
        )
    finally:
        holder.kill()
        holder.wait()
    assert supervisor.Supervisor(str(root)) and not os.path.exists(root / "train.log")  # no trainer started
