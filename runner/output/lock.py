"""Single-instance lock: an open-file-description lock on ``<out>/.lock`` holding the
runner's pid.

The kernel releases it when the process dies (even by SIGKILL), so a held lock is proof
of a live runner, and ``status`` can tell a crash from a run without trusting a pid file.
Readers test it with F_OFD_GETLK, which never takes it: a status poll (the watcher polls
every few seconds) must not make a runner starting at that moment think it is taken."""

from __future__ import annotations

import errno
import fcntl
import os
import struct

from ..contract.atomic import no_follow
from ..contract.errors import BrokenFileError, LockedError

NAME = ".lock"
# struct flock on Linux LP64: l_type, l_whence, l_start, l_len, l_pid (padded to 32 bytes)
_FLOCK = "hhqqi4x"


def _flock(kind: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 0, 0)  # the whole file; l_pid must be 0


class JobLock:
    def __init__(self, path: str):
        self.path = path  # the run's lock file (RunPaths.lock)
        self.fd: int | None = None

    def acquire(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:  # never through a link: the pid would be written over whatever it names, as root
            fd = no_follow(self.path, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise BrokenFileError(
                self.path, "a link where hsx's lock goes", "remove it; hsx makes its own"
            ) from None
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_WRLCK))
        except OSError:  # EAGAIN or EACCES: another open file description holds it
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
    """(held, pid) without taking the lock, so it never disturbs a runner taking it."""
    return is_held_at(os.path.join(out, NAME))


def held_any(out: str) -> tuple[str, int | None] | None:
    """The job's lock or a rank's (``.lock.rankR``) that a live runner holds: (path, pid)."""
    try:
        names = sorted(n for n in os.listdir(out) if n == NAME or n.startswith(NAME + ".rank"))
    except FileNotFoundError:
        return None
    for n in names:
        held, pid = is_held_at(os.path.join(out, n))
        if held:
            return os.path.join(out, n), pid
    return None


def try_ofd(fd: int, kind: int) -> bool:
    """Take an OFD lock of ``kind`` (F_RDLCK shared, F_WRLCK exclusive) on ``fd``, not waiting."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock(kind))
    except OSError:  # EAGAIN or EACCES
        return False
    return True


def wait_ofd(fd: int, kind: int) -> None:
    """Take an OFD lock of ``kind`` on ``fd``, waiting for whoever holds it."""
    fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, _flock(kind))


def blocks(path: str, kind: int) -> bool:
    """Whether another holder would refuse a lock of ``kind`` on ``path``, never taking it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _flock(kind))
    finally:
        os.close(fd)
    return struct.unpack(_FLOCK, got)[0] != fcntl.F_UNLCK


def is_held_at(path: str) -> tuple[bool, int | None]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False, None
    try:
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _flock(fcntl.F_WRLCK))
    finally:
        os.close(fd)
    held = struct.unpack(_FLOCK, got)[0] != fcntl.F_UNLCK
    return held, holder_pid(path)
