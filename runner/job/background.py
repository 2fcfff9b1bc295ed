"""Long verbs (verify, adopt, compact) in the background on the box: an SSH call or a Slack response URL
cannot wait hours for a multi-terabyte output, so the verb runs detached, niced, and keeps
``OUT/background.json`` true (progress, rate, ETA, then the result) for status and the watcher."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

from ..contract import timing
from ..contract.atomic import write_atomic
from ..contract.status import now_iso
from ..procs import alive
from . import detach

RECORD = "background.json"
LOCK = ".background.lock"


def path(out: str) -> str:
    return os.path.join(out, RECORD)


def read(out: str) -> dict | None:
    """The last background job's record; a running one whose process is gone reads 'crashed'."""
    try:
        with open(path(out)) as f:
            rec = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(rec, dict):
        return None
    if rec.get("state") == "running" and not alive(rec.get("pid")):
        rec["state"] = "crashed"
    return rec


def start(out: str, config: str, verb: str, args: list[str]) -> dict:
    """Spawn ``hsx-runner VERB --record ARGS`` detached and niced; answer once it has claimed
    the record (or refuse: one background job at a time). The check and the spawn hold a lock
    on ``OUT/.background.lock``, so starts at the same moment see each other's claim."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, LOCK), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released on close, and by the kernel if this process dies
        return _start(out, config, verb, args)


def _start(out: str, config: str, verb: str, args: list[str]) -> dict:
    have = read(out)
    if have and have.get("state") == "running":
        return {
            "started": False,
            "background": True,
            "reason": f"a background {have.get('verb')} is running (pid {have.get('pid')})",
        }
    argv = [sys.executable, "-m", "runner.cli", verb, "--json", "--config", config, "--record", *args]
    p = detach.spawn(argv, os.path.join(out, "logs", f"{verb}.out"), nice=10)
    if shutil.which("ionice"):  # idle I/O class: a live extraction's writes come first
        subprocess.run(["ionice", "-c", "3", "-p", str(p.pid)], capture_output=True, check=False)
    claimed = detach.wait_claim(p, lambda: (read(out) or {}).get("pid") == p.pid, timing.current().claim_s)
    if claimed is False:
        return {
            "started": False,
            "background": True,
            "reason": f"{verb} exited with code {p.returncode} at once; see logs/{verb}.out",
        }
    return {"started": True, "pid": p.pid, "verb": verb, "background": True}


def claim(out: str, verb: str, args: list[str]) -> Progress | None:
    """The record claimed for ``verb`` run by this very process, under the lock start takes
    (None: another background verb runs)."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, LOCK), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        have = read(out)
        if have and have.get("state") == "running":
            return None
        return Progress(out, verb, args)


@contextlib.contextmanager
def recording(out: str, verb: str, args: list[str], on: bool, plain: tuple = ()):
    """The detached run's Progress (None when not detached); an exception that ends the verb
    is written into the record (``plain`` ones without their type name) before it propagates."""
    prog = Progress(out, verb, args) if on else None
    try:
        yield prog
    except BaseException as e:
        if prog:
            prog.finish(None, str(e) if isinstance(e, plain) else f"{type(e).__name__}: {e}")
        raise


class Progress:
    """The running verb's side: progress at most every Timing.background_write_s, then the result."""

    def __init__(self, out: str, verb: str, args: list[str]):
        self.path = path(out)
        self.t0 = time.monotonic()
        self._last = 0.0
        self.rec = {
            "verb": verb, "args": args, "state": "running", "pid": os.getpid(), "started_at": now_iso(),
            "updated_at": now_iso(), "done": 0, "total": None, "bytes": 0, "rate_bytes_s": None,
            "files_per_s": None, "eta_s": None, "result": None,
        }  # fmt: skip
        self._write()

    def __call__(self, done: int, total: int, nbytes: int, **extra) -> None:
        """``extra``: the verb's own figures (compact: bytes freed so far), kept in the record."""
        now = time.monotonic()
        if now - self._last < timing.current().background_write_s and done < total:
            return
        self._last = now
        span = max(now - self.t0, 1e-6)
        files_per_s = done / span
        self.rec.update(
            done=done, total=total, bytes=nbytes, rate_bytes_s=nbytes / span, files_per_s=files_per_s,
            eta_s=(total - done) / files_per_s if files_per_s > 0 else None, **extra,
        )  # fmt: skip
        self._write()

    def finish(self, result: dict | None, error: str | None = None) -> None:
        self.rec.update(state="failed" if error else "done", result=result, error=error, eta_s=0)
        self._write()

    def _write(self) -> None:
        self.rec["updated_at"] = now_iso()
        write_atomic(self.path, json.dumps(self.rec) + "\n")
