"""A detached child that hsx starts and then answers about: the extraction's runner, the
training's supervisor, a background verb. One spawn, one wait for the child to claim its job
(so a start that dies at once says why instead of "started"), one stop by SIGTERM; every poll
from the timing module."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

from ..contract import timing


def spawn(argv: list[str], log_path: str, nice: int = 0) -> subprocess.Popen:
    """``argv`` in a session of its own (a signal to the caller's group misses it), its output
    appended to ``log_path``, no stdin."""
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=(lambda: os.nice(nice)) if nice else None,
        )  # fmt: skip


def wait_claim(p: subprocess.Popen, claims: Callable[[], bool], timeout_s: float) -> bool | None:
    """True once ``claims()`` says the child holds its job; False when it exited first; None
    when neither came within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if claims():
            return True
        if p.poll() is not None:
            return False
        time.sleep(timing.current().answer_poll_s)
    return None


def stop(pid: int, holds: Callable[[], bool], wait_s: float) -> bool:
    """SIGTERM ``pid``, then wait up to ``wait_s`` for ``holds()`` to say its job is free;
    whether it is."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and holds():
        time.sleep(timing.current().stop_poll_s)
    return not holds()
