"""The shared memory a server's processes leave in /dev/shm, and its removal after they die.

SGLang's processes make POSIX shared memory (the TP group's message queue, load snapshots;
NCCL's segments on a GPU box) and unlink it only on a clean exit: after a kill -9 or a
crashed rank it stays in /dev/shm, a tmpfs in RAM, and repeated crash-restarts fill it.
SGLang's own sweep runs in its CI only. So while a server runs, the runner notes its
processes and the files they hold (``observe``); once they are all gone, it removes
exactly those segments (``cleanup``), plus the ones SGLang stamps with the pid of one of
those processes (``sgl_shm_<kind>_<pid>_<rand>``). Only files the server made count: what was
in /dev/shm before it started (``begin`` notes those inodes and the time), and the job's own
paths (a model or dataset put in /dev/shm), are never its own, even while it has them open.
A segment some live process still has open or mapped is never removed. The notes are kept in
a file, so a runner that was itself killed cleans up after its server on the next start.
"""

from __future__ import annotations

import json
import os
import re
import time

from ..contract.atomic import write_atomic
from ..procs import group, pids

SHM_DIR = "/dev/shm"
_STAMPED = re.compile(r"sgl_shm_.+_([0-9]+)_[0-9a-f]+")  # fullmatch: ASCII digits, no newline


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


CTIME_SLACK_S = 1.0  # the kernel stamps ctime from a coarse clock, a tick behind time.time()


class ShmTracker:
    def __init__(self, state_path: str, shm_dir: str = SHM_DIR, keep: tuple[str, ...] = ()):
        self.state_path = state_path
        self.shm_dir = shm_dir
        self.keep = tuple(os.path.realpath(p) for p in keep if p)  # the job's inputs: never removed
        self.pids: set[int] = set()
        self.files: dict[str, int] = {}  # name -> inode, each made by the server after it started
        self.since: float | None = None  # when the server started; None: nothing is its own
        self.before: set[int] = set()  # inodes in shm_dir just before it started
        self._load()

    def _load(self) -> None:
        try:
            with open(self.state_path) as f:
                data = json.load(f)
            since = data.get("since")
            self.since = float(since) if since is not None else None  # older notes: no start known
            self.before = {int(i) for i in data.get("before", [])}
            self.pids = {int(p) for p in data.get("pids", [])}
            self.files = {str(n): int(i) for n, i in data.get("files", {}).items() if "/" not in str(n)}
        except (
            OSError,
            ValueError,
            TypeError,
            AttributeError,
        ):  # unreadable notes: nothing known, nothing removed
            self.pids, self.files, self.since, self.before = set(), {}, None, set()

    def _save(self) -> None:
        data = {
            "since": self.since,
            "pids": sorted(self.pids),
            "files": self.files,
            "before": sorted(self.before),
        }
        try:
            write_atomic(self.state_path, json.dumps(data))
        except OSError:
            pass

    def begin(self) -> None:
        """Just before the server starts: everything in shm_dir now is someone else's."""
        self.since = time.time()
        try:
            self.before = {e.inode() for e in os.scandir(self.shm_dir)}
        except OSError:
            self.before = set()
        self._save()

    def _made_by_server(self, name: str) -> int | None:
        """The file's inode if it appeared after the server started and is not the job's."""
        path = os.path.join(self.shm_dir, name)
        try:
            st = os.lstat(path)
        except OSError:
            return None
        real = os.path.realpath(path)
        if (
            self.since is None
            or st.st_ino in self.before
            or st.st_ctime < self.since - CTIME_SLACK_S
            or any(real == k or real.startswith(k + "/") or k.startswith(real + "/") for k in self.keep)
        ):
            return None
        return st.st_ino

    def observe(self, pgid: int) -> None:
        """Note the server's processes and the segments they made and hold now."""
        pids = group(pgid)
        new = {n: ino for n in held(pids, self.shm_dir) - set(self.files) if (ino := self._made_by_server(n))}
        if not pids <= self.pids or new:
            self.pids |= pids
            self.files.update(new)
            self._save()

    def own(self) -> set[str]:
        """Segments of this server's processes that are still in /dev/shm (the same files)."""
        try:
            present = {e.name: e.inode() for e in os.scandir(self.shm_dir)}
        except OSError:
            return set()
        noted = {n for n, ino in self.files.items() if present.get(n) == ino}
        stamped = {
            n
            for n in present
            if (m := _STAMPED.fullmatch(n)) and int(m.group(1)) in self.pids and self._made_by_server(n)
        }
        return noted | stamped

    def cleanup(self, pgid: int | None = None, wait_s: float = 5.0) -> list[str]:
        """Once the group ``pgid`` is gone (waits up to ``wait_s``), remove its segments that no
        live process holds; return their names. The notes start afresh for the next server."""
        deadline = time.monotonic() + wait_s
        while pgid is not None and group(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        mine = self.own()
        removed = []
        if mine:
            busy = held(pids(), self.shm_dir)
            for name in sorted(mine - busy):
                try:
                    os.unlink(os.path.join(self.shm_dir, name))
                    removed.append(name)
                except FileNotFoundError:
                    pass
                except OSError:
                    pass  # not ours to remove after all (another user's file)
        left = mine - set(removed)  # held by a process still alive: tried again next time
        self.files = {n: ino for n in left if (ino := self.files.get(n) or self._made_by_server(n))}
        if not left:
            self.pids = set()
        self._save()
        return removed
