"""Single-instance lock: an flock on ``<out>/.lock`` holding the runner's pid.

The kernel releases it when the process dies (even by SIGKILL), so a held lock is proof
of a live runner, and ``status`` can tell a crash from a run without trusting a pid file."""

from __future__ import annotations

import fcntl
import os

from .errors import LockedError

NAME = ".lock"


class JobLock:
    def __init__(self, out: str):
        self.path = os.path.join(out, NAME)
        self.fd: int | None = None

    def acquire(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockedError(holder_pid(self.path), self.path) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        os.fsync(fd)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def holder_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def is_held(out: str) -> tuple[bool, int | None]:
    """(held, pid) without disturbing the holder."""
    path = os.path.join(out, NAME)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False, None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True, holder_pid(path)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False, holder_pid(path)
    finally:
        os.close(fd)
