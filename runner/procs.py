"""Processes on this box as /proc tells them: one reader of ``/proc/PID/stat``, and the facts
the server's lifecycle, the shared-memory cleanup and free-gpus ask of it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time


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


def alive(pid: object) -> bool:
    """A process that runs (a zombie has ended): the one pid check of the box's records, whose
    pid may come from a broken file (anything not a positive int is no process)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


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


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """In a child before exec (``preexec_fn``): send it ``sig`` when the thread that started it
    dies, so a runner or supervisor killed by SIGKILL never leaves its server or trainer running
    unwatched (PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)
    except OSError:
        pass


def become_subreaper() -> None:
    """Orphans below this process become its children, not init's (PR_SET_CHILD_SUBREAPER):
    what a launcher started in sessions of their own stays where this process can find it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)
    except OSError:
        pass


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (zombies included), whatever session it started."""
    kids: dict[int, list[int]] = {}
    for p in pids():
        pg = parent_and_group(p)
        if pg:
            kids.setdefault(pg[0], []).append(p)
    out, todo = set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def end_descendants(timeout: float = 30.0) -> None:
    """SIGKILL everything below this process and reap what became its children (a subreaper's
    orphans), until nothing is left or ``timeout`` passes."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while (left := descendants(me)) and time.monotonic() < deadline:
        for p in left:
            st = proc_stat(p)
            if st and st[0] != "Z":
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, signal.SIGKILL)
            if (parent_and_group(p) or (0,))[0] == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(p, os.WNOHANG)
        time.sleep(0.05)
