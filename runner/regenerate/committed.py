"""rows.jsonl, the regeneration's commit log: one line per input row, ``{"row": i, "data": ROW,
"tokens": N}`` or ``{"row": i, "reason": WHY}``, appended whole and fsynced. A kill -9 leaves at
most a torn last line, cut before the next append; the first whole line of a row is its answer,
so a row is never counted twice, and a resume plans the rows not there. The output is written
from it at the end, in input order."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

from ..contract.atomic import fsync_path, write_atomic
from ..output import jsonl


def append(path: str, entry: dict) -> None:
    line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line + b"\n")  # one write of a whole line
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: str, total: int) -> dict[int, dict]:
    """The rows committed, by index: the first whole, well-formed line of each."""
    jsonl.repair_tail(path)
    done: dict[int, dict] = {}
    for e in jsonl.read(path):
        i = e.get("row")
        if not (isinstance(i, int) and not isinstance(i, bool) and 0 <= i < total):
            continue
        ok = isinstance(e.get("data"), dict) and isinstance(e.get("tokens"), int)
        if ok or isinstance(e.get("reason"), str):
            done.setdefault(i, e)
    return done


def write_output(done: dict[int, dict], total: int, output: str, failures: str, meta: str, how: dict) -> None:
    """The new dataset in input order (the rows regenerated), the rows that were not with their
    reasons, and how it was made; each file whole or not at all, the dataset last."""
    failed = [
        json.dumps({"row": i, "id": done[i].get("id"), "reason": done[i]["reason"]}, ensure_ascii=False)
        + "\n"
        for i in range(total)
        if "data" not in done[i]
    ]
    folder = os.path.dirname(os.path.abspath(output))
    os.makedirs(folder, exist_ok=True)
    write_atomic(failures, "".join(failed), 0o644)
    write_atomic(meta, json.dumps(how, indent=1) + "\n", 0o644)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(output)}.", suffix=".tmp", dir=folder)
    try:  # streamed: a dataset of many rows is never one string
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o644)
            for i in range(total):
                if "data" in done[i]:
                    f.write(json.dumps(done[i]["data"], ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_path(folder)
