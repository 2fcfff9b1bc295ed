"""Processes on this box as /proc tells them: one reader of ``/proc/PID/stat``, and the facts
the server's lifecycle, the shared-memory cleanup and free-gpus ask of it."""

from __future__ import annotations

import ctypes
import os
import signal


def pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _stat(pid: int) -> list[str] | None:
    """The fields after the command name (which may hold spaces and parentheses): index 0 is
    the state (field 3), 1 the parent, 2 the process group, 19 the start time (field 22)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, wait status once a zombie) of a process, None if gone."""
    rest = _stat(pid)
    try:
        return (rest[0], int(rest[2]), int(rest[49]) if len(rest) > 49 else 0) if rest else None
    except (IndexError, ValueError):
        return None


def parent_and_group(pid: int) -> tuple[int, int] | None:
    rest = _stat(pid)
    try:
        return (int(rest[1]), int(rest[2])) if rest else None
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """When a process started, in clock ticks after boot: with the boot, what tells it from a
    later process given the same pid. None if gone."""
    rest = _stat(pid)
    try:
        return int(rest[19]) if rest else None
    except (IndexError, ValueError):
        return None


def group(pgid: int) -> set[int]:
    """The live (not zombie) processes of a process group."""
    out = set()
    for pid in pids():
        st = proc_stat(pid)
        if st and st[1] == pgid and st[0] != "Z":
            out.add(pid)
    return out


def die_with_parent() -> None:
    """In a child before exec (``preexec_fn``): SIGKILL it when the thread that started it dies,
    so a runner or supervisor killed by SIGKILL never leaves its server or trainer running
    unwatched (PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass
