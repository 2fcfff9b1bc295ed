"""The single-instance lock: held means a live runner; looking never blocks taking it; status
reads a record whose runner no longer holds the lock as crashed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from runner.contract.config import from_dict
from runner.contract.errors import LockedError
from runner.contract.replies import REFUSED
from runner.contract.status import STATUS, Phase, StatusRecord, write_record
from runner.engines.local import LocalEngine
from runner.job import view
from runner.output.lock import JobLock, is_held
from runner.output.ranks import RunPaths


def test_status_readers_never_make_a_free_lock_look_taken(tmp_path):
    """A watcher polling status must not make a runner starting at that moment refuse."""
    out = str(tmp_path)
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            is_held(out)

    readers = [threading.Thread(target=poll) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for _ in range(300):
            lock = JobLock(RunPaths(out).lock)
            lock.acquire()
            assert is_held(out)[0]
            lock.release()
    finally:
        stop.set()
        for t in readers:
            t.join()


def test_a_live_holder_is_refused_with_its_pid(tmp_path):
    out = str(tmp_path)
    code = f"from runner.output.lock import JobLock; JobLock({out!r} + '/.lock').acquire(); print('ok', flush=True); input()"
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        assert is_held(out) == (True, holder.pid)
        with pytest.raises(LockedError) as e:
            JobLock(RunPaths(out).lock).acquire()
        assert str(holder.pid) in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    assert is_held(out) == (False, holder.pid)  # released by the kernel, even on SIGKILL
    JobLock(RunPaths(out).lock).acquire()


def test_status_is_the_record_while_the_lock_is_held_and_crashed_once_it_is_not(tmp_path):
    out = str(tmp_path)
    rec = view.current(out)
    assert rec.phase == Phase.STOPPED and rec.reason == view.NOT_STARTED and not rec.alive and rec.total == 0
    with open(os.path.join(out, "dataset.json"), "w") as f:
        json.dump({"total": 7}, f)
    assert view.current(out).total == 7  # a job set up but never run still shows its size

    write_record(os.path.join(out, STATUS), StatusRecord(
        job="j", phase=Phase.EXTRACTING, pid=os.getpid(), total=7, done=3, rate=1.5,
        heartbeat_at="2030-01-02T03:04:05Z",
    ))  # fmt: skip
    lock = JobLock(RunPaths(out).lock)
    lock.acquire()
    try:
        rec = view.current(out)
        assert rec.phase == Phase.EXTRACTING and rec.alive and rec.rate == 1.5 and rec.done == 3
    finally:
        lock.release()
    rec = view.current(out)
    assert rec.phase == Phase.CRASHED and not rec.alive and rec.rate is None
    assert rec.reason == (
        f"runner (pid {os.getpid()}) is gone; it was extracting at its last heartbeat, Jan 2 03:04:05 UTC"
    )  # the time as a person reads it, not the record's ISO stamp


@pytest.mark.parametrize("phase,said", [(Phase.DONE, "nothing to do: the job is done"),
                                        (Phase.EXTRACTING, "already running")])  # fmt: skip
def test_a_start_while_the_runner_holds_the_job_says_whether_it_is_done(tmp_path, phase, said):
    """The record says done a moment before its runner lets go (it stops its server first): a
    resume then is told there is nothing to do, not that the job runs."""
    out = tmp_path / "out"
    out.mkdir()
    cfg = from_dict(
        {"job": {"name": "t", "model": "m", "dataset": "d.jsonl", "out": str(out)}}, str(tmp_path)
    )
    write_record(os.path.join(out, STATUS), StatusRecord(phase=phase, pid=os.getpid(), alive=True))
    lock = JobLock(RunPaths(str(out)).lock)
    lock.acquire()
    try:
        rep = LocalEngine(cfg).resume()
    finally:
        lock.release()
    assert rep.code == REFUSED and rep.payload()["reason"].startswith(said), rep.payload()
    assert f"pid {os.getpid()}" in rep.payload()["reason"]


def test_a_link_where_the_lock_goes_is_refused_and_what_it_names_is_kept(tmp_path):
    """A run dir's `.lock` made a link to another file (a wrong run_dir, or someone else's doing):
    taking the lock wrote the pid over that file, as root (issue 47)."""
    from runner.contract.errors import BrokenFileError

    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0\n")
    (tmp_path / "run").mkdir()
    os.symlink(victim, tmp_path / "run" / ".lock")
    with pytest.raises(BrokenFileError, match="a link where hsx's lock goes"):
        JobLock(str(tmp_path / "run" / ".lock")).acquire()
    assert victim.read_text() == "root:x:0:0\n"
