"""The single-instance lock: held means a live runner; looking never blocks taking it."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from runner.contract.errors import LockedError
from runner.lock import JobLock, is_held
from runner.ranks import Names


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
            lock = JobLock(Names(out).lock)
            lock.acquire()
            assert is_held(out)[0]
            lock.release()
    finally:
        stop.set()
        for t in readers:
            t.join()


def test_a_live_holder_is_refused_with_its_pid(tmp_path):
    out = str(tmp_path)
    code = f"from runner.lock import JobLock; JobLock({out!r} + '/.lock').acquire(); print('ok', flush=True); input()"
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        assert is_held(out) == (True, holder.pid)
        with pytest.raises(LockedError) as e:
            JobLock(Names(out).lock).acquire()
        assert str(holder.pid) in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    assert is_held(out) == (False, holder.pid)  # released by the kernel, even on SIGKILL
    JobLock(Names(out).lock).acquire()
