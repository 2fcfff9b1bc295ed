"""Atomic file writes: readers see the old file or the new one, never a torn one."""

from __future__ import annotations

import json
import os
import tempfile

STATE_MODE = 0o600  # hsx's own records: read back by the same user (over SSH too), by no one else


def write_atomic(path: str, text: str, mode: int = STATE_MODE) -> None:
    """Write text so readers see the old or the new file, never a torn one.

    The temp file is made by ``mkstemp`` beside the target (an unpredictable name, O_EXCL: a
    planted file or symlink is never opened, and concurrent writers never share one), gets
    ``mode`` (owner-only by default, whatever the old file had), is fsynced, then renamed over
    the target (a symlink there is replaced, never written through)."""
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def fsync_path(path: str) -> None:
    """fsync a file or a directory by its path (a directory's, so a rename in it is on disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_object(path: str) -> dict | None:
    """A JSON object file as written by write_atomic; None when absent, unreadable or not an object."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError, RecursionError):  # ValueError: not JSON, not UTF-8, 5,000 digits
        return None
    return d if isinstance(d, dict) else None


def read_jsonl(path: str, last: int | None = None, max_line: int = 1 << 20) -> list[dict]:
    """The JSON objects of a line file (events, a history, the audit log), as its writer may have
    left it (see ``json_objects``). ``last``: its last lines only, read from its end (a status
    polled every few seconds reads a few blocks, not a run's whole history)."""
    try:
        with open(path, "rb") as f:
            lines = _tail(f, last) if last else f.read().splitlines()
    except OSError:
        return []
    return json_objects(lines, max_line)


def _tail(f, last: int, block: int = 1 << 16) -> list[bytes]:
    """The last ``last`` lines of the open file ``f``."""
    at = f.seek(0, os.SEEK_END)
    buf = b""
    while at > 0 and buf.count(b"\n") <= last:
        step = min(block, at)
        at -= step
        f.seek(at)
        buf = f.read(step) + buf
    lines = buf.splitlines()
    return (lines[1:] if at > 0 else lines)[-last:]  # from the middle of the file: its first is a part


def torn(path: str) -> bool:
    """The line file's last line has no newline: its writer died mid-write. An appender ends it
    first, so it stays one bad line instead of spoiling the next."""
    try:
        with open(path, "rb") as f:
            if f.seek(0, os.SEEK_END) == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


def json_objects(lines: list, max_line: int = 1 << 20) -> list[dict]:
    """The lines that are JSON objects: a torn last line, a line that is not JSON, not an object,
    longer than ``max_line``, nested too deep or of 5,000 digits is passed over, never raised."""
    out = []
    for line in lines:
        if len(line) > max_line:
            continue
        try:
            d = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(d, dict):
            out.append(d)
    return out


def no_follow(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symlink at ``path`` (ELOOP): hsx's files in a run dir are
    never written through a link someone planted there."""
    return os.open(path, flags | os.O_NOFOLLOW, mode)
