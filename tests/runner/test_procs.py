"""The one pid check of the box's records (background verbs, the extraction's hand-off, the
holders of the features): a process that runs; a zombie has ended; a pid from a broken file is none."""

from __future__ import annotations

import os
import subprocess
import sys

from runner import procs
from tests.runner.helpers import wait_for


def test_alive_is_a_running_process_and_not_a_zombie_or_a_bad_pid():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert procs.alive(child.pid) and procs.alive(os.getpid())
        child.stdin.close()  # it ends; unreaped, it stays a zombie
        wait_for(lambda: (procs.proc_stat(child.pid) or ("Z",))[0] == "Z", timeout=30, what="a zombie")
        assert not procs.alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not procs.alive(child.pid)  # reaped: gone
    for bad in (None, 0, -1, True, "12", 1.0, 10**30):
        assert not procs.alive(bad), bad
