"""rows.jsonl, the regeneration's commit log: one line per input row, ``{"row": i, "data": ROW,
"tokens": N}`` or ``{"row": i, "reason": WHY}``, appended whole and fsynced. A kill -9 leaves at
most a torn last line, cut before the next append; the first whole line of a row is its answer,
so a row is never counted twice, and a resume plans the rows not there. The output is written
from it at the end, in input order. On Slurm each rank appends to its own rows.rankR.jsonl, its
own range of rows only, and the output is written from all of them (``read_ranks``)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

from ..contract.atomic import fsync_path, write_atomic
from ..contract.config import Config
from ..contract.regenerate import ROWS
from ..output import jsonl
from . import control, record


def append(path: str, entry: dict) -> None:
    line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line + b"\n")  # one write of a whole line
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: str, hi: int, lo: int = 0, repair: bool = True) -> dict[int, dict]:
    """The rows committed in [lo, hi), by index: the first whole, well-formed line of each.
    ``repair``: a torn last line cut first, by the file's own writer only (before it appends)."""
    if repair:
        jsonl.repair_tail(path)
    done: dict[int, dict] = {}
    for e in jsonl.read(path):
        i = e.get("row")
        if not (isinstance(i, int) and not isinstance(i, bool) and lo <= i < hi):
            continue
        ok = isinstance(e.get("data"), dict) and isinstance(e.get("tokens"), int)
        if ok or isinstance(e.get("reason"), str):
            done.setdefault(i, e)
    return done


def read_ranks(root: str, ranges: list[tuple[int, int]]) -> dict[int, dict]:
    """Every Slurm rank's rows, each from its own file and its own range; none cut (a rank's
    file is its own to repair)."""
    done: dict[int, dict] = {}
    for r, (lo, hi) in enumerate(ranges):
        done.update(read(os.path.join(root, jsonl.rank_file(ROWS, r)), hi, lo, repair=False))
    return done


def finish_ranks(cfg: Config, root: str, source: str, total: int, ranges: list[tuple[int, int]]) -> bool:
    """The one output from every rank's rows, once every rank's record says done (each writes it
    only with all its rows committed); False, nothing written, while one does not."""
    if not record.ranks_done(root, len(ranges)):
        return False
    finish(cfg, source, read_ranks(root, ranges), total)
    return True


def finish(cfg: Config, source: str, done: dict[int, dict], total: int) -> None:
    """The new dataset, its failures and how it was made, from every row's commit; never while a
    row has none. Idempotent: each file is replaced whole, with the same bytes each time, so two
    processes that both see the last row committed may both write it."""
    missing = [i for i in range(total) if i not in done]
    if missing:
        raise RuntimeError(
            f"{len(missing)} row(s) not committed (the first: {missing[0]}): no output written"
        )
    failed = sum("data" not in e for e in done.values())
    r = cfg.regenerate
    how = {"source": source, "rows": total, "regenerated": total - failed, "not_regenerated": failed,
           "failures": control.failures(cfg), "model": cfg.job.model, "backend": cfg.server.backend,
           "max_new_tokens": r.max_new_tokens, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k,
           "seed": r.seed, "reasoning": r.reasoning, "max_length": cfg.job.max_length}  # fmt: skip
    write_output(done, total, control.output(cfg), control.failures(cfg), control.meta(cfg), how)


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
