"""Append-only line files (manifest.jsonl, failed.jsonl, and each rank's own): one whole line
per write, a torn last line cut before the next append, and the files of several ranks read
back in write order."""

from __future__ import annotations

import os
import re

import orjson


def rank_file(name: str, rank: int | None) -> str:
    """manifest.jsonl -> manifest.rank3.jsonl: each rank appends only to its own files, since
    appends from several nodes to one file are not safe on every shared filesystem (NFS)."""
    if rank is None:
        return name
    stem, dot, ext = name.partition(".")
    return f"{stem}.rank{rank}{dot}{ext}"


def repair_tail(path: str) -> None:
    """A crash mid-append can leave a torn last line: cut it so appends stay parseable."""
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(max(0, size - 1))
            if f.read(1) == b"\n":
                return
            end = size  # back a chunk at a time: a torn line can be longer than one (a whole conversation)
            while end > 0:
                start = max(0, end - 65536)
                f.seek(start)
                cut = f.read(end - start).rfind(b"\n")
                if cut >= 0:
                    f.truncate(start + cut + 1)
                    return
                end = start
            f.truncate(0)  # one line, torn
    except FileNotFoundError:
        pass


def append(path: str, line: bytes) -> None:
    # One write() of a whole line on an O_APPEND fd: a crash leaves at most a torn last line.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line + b"\n")
    finally:
        os.close(fd)


def all_files(out: str, name: str) -> list[str]:
    """The job's file and, after a cluster run, one per rank (manifest.rank{R}.jsonl: R in
    ASCII digits, the whole name, so no other file is read as a rank's)."""
    stem, _, ext = name.partition(".")
    rank_re = re.compile(re.escape(stem) + r"\.rank[0-9]+\." + re.escape(ext) + r"\Z")
    try:
        ranked = sorted(n for n in os.listdir(out) if rank_re.fullmatch(n))
    except FileNotFoundError:
        return []
    return [os.path.join(out, name)] + [os.path.join(out, n) for n in ranked]


def read_all(out: str, name: str, time_key: str):
    """Records of every file in write order (by their time stamp when there are several
    files: a repair's requeue in one file must follow the failure it cancels in another)."""
    paths = all_files(out, name)
    if len(paths) <= 1:
        yield from read(paths[0] if paths else os.path.join(out, name))
        return
    recs = [r for p in paths for r in read(p)]
    recs.sort(key=lambda r: str(r.get(time_key) or ""))  # stable: lines keep their order on ties
    yield from recs


def read(path: str):
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec, dict):
                    yield rec
    except FileNotFoundError:
        return
