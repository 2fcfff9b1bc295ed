"""The server's pid file, and the one check before a stale server is killed.

The file outlives a runner killed by kill -9 and a reboot, and an output directory may be
shared by hosts; a pid alone may name any process by then. So it records what makes the pid
that server and no other: the host, the boot (``/proc/sys/kernel/random/boot_id``) and the
process's start time (``/proc/PID/stat`` field 22). A stale server is killed only when all
three match a live process that still leads its process group."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket

from ..contract.atomic import write_atomic
from ..procs import group, start_time

log = logging.getLogger("hsx.server")
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str:
    try:
        with open(BOOT_ID) as f:
            return f.read().strip()
    except OSError:
        return ""


def identity(pid: int) -> dict | None:
    """{pid, host, boot_id, start_time} of a live process; None if it is gone."""
    started = start_time(pid)
    if started is None:
        return None
    return {"pid": pid, "host": socket.gethostname(), "boot_id": boot_id(), "start_time": started}


def write(path: str, pid: int) -> None:
    rec = identity(pid) or {"pid": pid}  # gone already: a file nothing will be killed by
    write_atomic(path, json.dumps(rec) + "\n")


def _verified(path: str) -> tuple[int | None, str]:
    """(the group to kill, '') or (None, why not): every recorded field must match."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None, ""
    except OSError as e:
        return None, f"unreadable ({e})"
    try:
        rec = json.loads(text)
    except ValueError:
        rec = None
    if isinstance(rec, int) and not isinstance(rec, bool):
        return None, f"names pid {rec} without its identity (an older hsx's file)"
    if not isinstance(rec, dict) or not isinstance(rec.get("pid"), int) or isinstance(rec.get("pid"), bool):
        return None, f"is damaged ({text.strip()[:40]!r})"
    pid = rec["pid"]
    if pid <= 1:
        return None, f"names pid {pid}"
    now = identity(pid)
    if now is None:
        return None, f"names pid {pid}, which is gone"
    for key in ("host", "boot_id", "start_time"):
        if rec.get(key) != now[key]:
            return (
                None,
                f"names pid {pid}, but its {key} is {rec.get(key)!r}, not this process's {now[key]!r}",
            )
    if pid not in group(pid):
        return None, f"names pid {pid}, which no longer leads its process group"
    return pid, ""


def live(path: str) -> int | None:
    """The pid of the server the file names, when that very server still runs."""
    return _verified(path)[0]


def kill_stale(path: str) -> int | None:
    """SIGKILL the process group of the server the file names, if it is that server; the
    group's id when it was killed, else None. A file that does not prove it is removed, and
    the process it names is left alone."""
    pgid, why = _verified(path)
    if pgid is None:
        if why:
            log.warning("%s %s: the process is left alone and the file removed", path, why)
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return None
    log.warning("killed the process group %d of the server a previous runner left (%s)", pgid, path)
    return pgid
