"""The shared memory a server's processes leave in /dev/shm, and its removal after they die.

SGLang's processes make POSIX shared memory (the TP group's message queue, load snapshots;
NCCL's segments on a GPU box) and unlink it only on a clean exit: after a kill -9 or a
crashed rank it stays in /dev/shm, a tmpfs in RAM, and repeated crash-restarts fill it.
SGLang's own sweep runs in its CI only. So while a server runs, the runner notes its
processes and the files they hold (``observe``); once they are all gone, it removes
exactly those segments (``cleanup``), plus the ones SGLang stamps with the pid of one of
those processes (``sgl_shm_<kind>_<pid>_<rand>``). A segment some live process still has
open or mapped is never removed. The notes are kept in a file, so a runner that was itself
killed cleans up after its server on the next start.
"""

from __future__ import annotations

import json
import os
import re
import time

from ..contract.atomic import write_atomic

SHM_DIR = "/dev/shm"
_STAMPED = re.compile(r"^sgl_shm_.+_(\d+)_[0-9a-f]+$")


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, wait status once a zombie) of a process, None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return rest[0], int(rest[2]), int(rest[49]) if len(rest) > 49 else 0
    except (OSError, IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """When a process started, in clock ticks after boot (/proc/PID/stat field 22): with the
    boot, what tells it from a later process given the same pid. None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def group(pgid: int) -> set[int]:
    """The live (not zombie) processes of a process group."""
    out = set()
    for pid in _pids():
        st = proc_stat(pid)
        if st and st[1] == pgid and st[0] != "Z":
            out.add(pid)
    return out


def _inodes(pids, shm_dir: str) -> set[int]:
    """Inodes of the files in ``shm_dir`` these processes have mapped or open. By inode, not
    name: a POSIX semaphore is mapped under the temporary name it was made with (``sem.XXXXXX
    (deleted)``) and then linked as ``sem.mp-…``, so only the inode ties the two."""
    prefix = shm_dir.rstrip("/") + "/"
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    if prefix in line:
                        out.add(int(line.split()[4]))
        except (OSError, ValueError, IndexError):
            pass
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                    out.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
            except OSError:
                continue
    return out


def held(pids, shm_dir: str = SHM_DIR) -> set[str]:
    """Names in ``shm_dir`` whose files these processes have mapped or open."""
    inodes = _inodes(pids, shm_dir)
    try:
        return {e.name for e in os.scandir(shm_dir) if e.inode() in inodes}
    except OSError:
        return set()


class ShmTracker:
    def __init__(self, state_path: str, shm_dir: str = SHM_DIR):
        self.state_path = state_path
        self.shm_dir = shm_dir
        self.pids: set[int] = set()
        self.names: set[str] = set()
        self._load()

    def _load(self) -> None:
        try:
            with open(self.state_path) as f:
                data = json.load(f)
            self.pids = {int(p) for p in data.get("pids", [])}
            self.names = {str(n) for n in data.get("names", []) if "/" not in str(n)}
        except (OSError, ValueError, TypeError, AttributeError):
            self.pids, self.names = set(), set()  # unreadable notes: nothing known, nothing removed

    def _save(self) -> None:
        data = {"pids": sorted(self.pids), "names": sorted(self.names)}
        try:
            write_atomic(self.state_path, json.dumps(data))
        except OSError:
            pass

    def observe(self, pgid: int) -> None:
        """Note the server's processes and the segments they hold now."""
        pids = group(pgid)
        names = held(pids, self.shm_dir)
        if not (pids <= self.pids and names <= self.names):
            self.pids |= pids
            self.names |= names
            self._save()

    def own(self) -> set[str]:
        """Segments of this server's processes that are still in /dev/shm."""
        try:
            present = set(os.listdir(self.shm_dir))
        except OSError:
            return set()
        stamped = {n for n in present if (m := _STAMPED.match(n)) and int(m.group(1)) in self.pids}
        return (self.names & present) | stamped

    def cleanup(self, pgid: int | None = None, wait_s: float = 5.0) -> list[str]:
        """Once the group ``pgid`` is gone (waits up to ``wait_s``), remove its segments that no
        live process holds; return their names. The notes start afresh for the next server."""
        deadline = time.monotonic() + wait_s
        while pgid is not None and group(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        mine = self.own()
        removed = []
        if mine:
            busy = held(_pids(), self.shm_dir)
            for name in sorted(mine - busy):
                try:
                    os.unlink(os.path.join(self.shm_dir, name))
                    removed.append(name)
                except FileNotFoundError:
                    pass
                except OSError:
                    pass  # not ours to remove after all (another user's file)
        left = mine - set(removed)  # held by a process still alive: tried again next time
        self.names = left
        if not left:
            self.pids = set()
        self._save()
        return removed
