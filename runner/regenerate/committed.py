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
from array import array

import orjson

from ..contract.atomic import fsync_path, write_atomic
from ..contract.config import Config
from ..contract.regenerate import ROWS
from ..output import jsonl
from . import control, record


class Rows:
    """The rows committed, by where each one's first whole line is in its log: a row's
    conversation stays on disk (a regeneration's rows are whole conversations, millions of them),
    read back by ``rows[i]`` or in input order by ``entries``. The record's figures (rows, those
    not regenerated, tokens, the last reason) are kept as rows are added, never recounted."""

    def __init__(self) -> None:
        self._parts: list[tuple[int, int, str, array]] = []  # lo, hi, log, each row's offset or -1
        self.count = self.failed = self.tokens = self.cut = 0
        self.last_failure: dict | None = None

    def cover(self, path: str, lo: int, hi: int) -> None:
        """Rows [lo, hi) are committed to ``path`` (each log its own range)."""
        self._parts.append((lo, hi, path, array("q", [-1]) * (hi - lo)))

    def _at(self, i: int) -> tuple[str, array, int] | None:
        for lo, hi, path, at in self._parts:
            if lo <= i < hi:
                return path, at, i - lo
        return None

    def add(self, i: int, entry: dict, offset: int) -> bool:
        """Row ``i``'s line at ``offset`` of its log; False, nothing kept, if it has one already
        or is not in a covered range."""
        part = self._at(i)
        if part is None or part[1][part[2]] >= 0:
            return False
        part[1][part[2]] = offset
        self.count += 1
        self.tokens += int(entry.get("tokens") or 0)
        self.cut += bool(entry.get("cut"))
        if "data" not in entry:
            self.failed += 1
            self.last_failure = {"row": i, "reason": entry.get("reason")}
        return True

    def __contains__(self, i: object) -> bool:
        part = self._at(i) if isinstance(i, int) else None
        return part is not None and part[1][part[2]] >= 0

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        for lo, _hi, _path, at in sorted(self._parts):
            yield from (lo + k for k, off in enumerate(at) if off >= 0)

    def __getitem__(self, i: int) -> dict:
        for _, e in self.entries((i,)):
            return e
        raise KeyError(i)

    def entries(self, rows):
        """(i, entry) of each committed row of ``rows``, in their order, read back from the logs."""
        files: dict[str, object] = {}
        try:
            for i in rows:
                part = self._at(i)
                if part is None or part[1][part[2]] < 0:
                    continue
                path, at, k = part
                f = files.get(path) or files.setdefault(path, open(path, "rb"))  # noqa: SIM115 - closed below
                f.seek(at[k])
                yield i, json.loads(f.readline())  # not orjson: a row's 30-digit integer id stays one
        finally:
            for f in files.values():
                f.close()


def append(path: str, entry: dict) -> int:
    """Commits one row's line; returns where it begins (this log has one writer: its supervisor).
    An entry that cannot be written as JSON text (a server's answer with a lone surrogate, say) is
    committed as the row's failure, with that reason: one row never stops the run."""
    try:
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except (ValueError, TypeError) as e:  # UnicodeEncodeError is a ValueError
        why = {
            "row": entry["row"],
            "id": None,
            "reason": f"its answer cannot be written as JSON: {str(e)[:200]}",
        }
        entry.clear()
        entry.update(why)
        line = json.dumps(entry, ensure_ascii=True, separators=(",", ":")).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        at = os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, line + b"\n")  # one write of a whole line
        os.fsync(fd)
    finally:
        os.close(fd)
    return at


def read(path: str, hi: int, lo: int = 0, repair: bool = True, into: Rows | None = None) -> Rows:
    """The rows committed in [lo, hi): the first whole, well-formed line of each. ``repair``: a
    torn last line cut first, by the file's own writer only (before it appends)."""
    if repair:
        jsonl.repair_tail(path)
    rows = into if into is not None else Rows()
    rows.cover(path, lo, hi)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return rows
    with f:
        at = 0
        for line in f:
            here, at = at, at + len(line)
            try:
                e = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            i = e.get("row") if isinstance(e, dict) else None
            if not (isinstance(i, int) and not isinstance(i, bool) and lo <= i < hi):
                continue
            ok = isinstance(e.get("data"), dict) and isinstance(e.get("tokens"), int)
            if ok or isinstance(e.get("reason"), str):
                rows.add(i, e, here)
    return rows


def read_ranks(root: str, ranges: list[tuple[int, int]]) -> Rows:
    """Every Slurm rank's rows, each from its own file and its own range; none cut (a rank's
    file is its own to repair)."""
    rows = Rows()
    for r, (lo, hi) in enumerate(ranges):
        read(os.path.join(root, jsonl.rank_file(ROWS, r)), hi, lo, repair=False, into=rows)
    return rows


def finish_ranks(cfg: Config, root: str, source: str, total: int, ranges: list[tuple[int, int]]) -> bool:
    """The one output from every rank's rows, once every rank's record says done (each writes it
    only with all its rows committed); False, nothing written, while one does not."""
    if not record.ranks_done(root, len(ranges)):
        return False
    finish(cfg, source, read_ranks(root, ranges), total)
    return True


def finish(cfg: Config, source: str, done: Rows, total: int) -> None:
    """The new dataset, its failures and how it was made, from every row's commit; never while a
    row has none. Idempotent: each file is replaced whole, with the same bytes each time, so two
    processes that both see the last row committed may both write it."""
    if hit := control.overwrites(cfg, source):  # the config edited since the start: the input is kept
        raise RuntimeError(
            f"{hit} is the input dataset {source}: nothing written; name another [regenerate] output"
        )
    missing = next((i for i in range(total) if i not in done), None)
    if missing is not None:
        raise RuntimeError(
            f"{total - len(done)} row(s) not committed (the first: {missing}): no output written"
        )
    r = cfg.regenerate
    how = {"source": source, "rows": total, "regenerated": total - done.failed, "not_regenerated": done.failed,
           "cut_at_limit": done.cut,
           "failures": control.failures(cfg), "model": cfg.job.model, "backend": cfg.server.backend,
           "max_new_tokens": r.max_new_tokens, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k,
           "seed": r.seed, "reasoning": r.reasoning, "max_length": cfg.job.max_length}  # fmt: skip
    write_output(done, total, control.output(cfg), control.failures(cfg), control.meta(cfg), how)


def write_output(done: Rows, total: int, output: str, failures: str, meta: str, how: dict) -> None:
    """The new dataset in input order (the rows regenerated), the rows that were not with their
    reasons, and how it was made; each file whole or not at all, the dataset last. Streamed from
    the logs: a dataset of many rows is never in memory."""
    folder = os.path.dirname(os.path.abspath(output))
    os.makedirs(folder, exist_ok=True)
    failed = []
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(output)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o644)
            for i, e in done.entries(range(total)):
                if "data" in e:
                    f.write(json.dumps(e["data"], ensure_ascii=False) + "\n")
                else:
                    failed.append(
                        json.dumps({"row": i, "id": e.get("id"), "reason": e["reason"]}, ensure_ascii=False)
                    )
            f.flush()
            os.fsync(f.fileno())
        write_atomic(failures, "".join(x + "\n" for x in failed), 0o644)
        write_atomic(meta, json.dumps(how, indent=1) + "\n", 0o644)
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_path(folder)
