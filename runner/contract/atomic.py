"""Atomic file writes: readers see the old file or the new one, never a torn one."""

from __future__ import annotations

import os


def write_atomic(path: str, text: str) -> None:
    """Write text so readers see the old or the new file, never a torn one."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_path(path: str) -> None:
    """fsync a file or a directory by its path (a directory's, so a rename in it is on disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
