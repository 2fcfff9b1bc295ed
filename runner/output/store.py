"""The output directory: shard layout, manifest, failures, and resume planning.

A sample is committed when its file has been renamed to ``rows_{g}-{g+2000}/data_{idx}.ckpt``
(or ``.ckpt.gz``, by [job] storage; an output may hold both kinds, never both for one sample)
after its manifest line (the writer fsynced it first). Planning trusts the shard listing
(files appear only complete), reconciles it with the manifest, and never stats each file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import shutil
import threading
from dataclasses import dataclass, field

import orjson

from ..contract import dump
from ..contract.atomic import read_object, write_atomic
from ..contract.config import Config
from ..contract.errors import ConfigError
from ..data import layers
from . import jsonl

log = logging.getLogger("hsx.store")
# Rows per shard: SpecForge's layout (rows_0-2000, ...). HSX_SHARD_ROWS is a test-only seam (a
# cluster test spans several shards and ranks with a few hundred rows); read once at import, so
# every module of one process agrees. Never set it for a real job.
SHARD_ENV = "HSX_SHARD_ROWS"
SHARD = int(os.environ.get(SHARD_ENV) or 2000)
# Names are matched whole (fullmatch; \Z, not $, which allows a trailing newline) in ASCII
# digits: "data_\u0663.ckpt" (an Arabic-Indic 3) or "data_3.ckpt\n" is no sample of ours.
SHARD_RE = re.compile(r"rows_([0-9]+)-([0-9]+)\Z")
FILE_RE = re.compile(r"data_([0-9]+)\.ckpt(?:\.gz)?\Z")
MANIFEST = "manifest.jsonl"
_IDX_RE = re.compile(rb'\{"idx":([0-9]+),')
_LINE_RE = re.compile(rb'\{"idx":([0-9]+),[^\n]*')
_ADOPTED = b'"adopted":true'
FAILED = "failed.jsonl"
TMP_DIR = ".tmp"
DESCRIPTION = "dataset.json"  # what the output holds; the pinned keys refuse another job
FORMAT = "hsx-specforge-v1"
# Keys that must not change between runs writing into the same output.
PINNED = ("model", "dataset", "total", "max_length", "hidden_size", "dtype", "aux_layer_ids", "mantissa_bits")
# What a pinned key meant before it was written down (dataset.json of an older hsx).
PINNED_DEFAULTS = {"mantissa_bits": dump.BF16_MANTISSA_BITS}
COMPLETE_DIR = ".complete"  # one empty marker per shard whose every sample is settled


def describe(cfg: Config, info: dict, aux: list[int], aux_source: str, total: int, tokenizer: str) -> dict:
    return {
        "format": FORMAT,
        "model": os.path.abspath(cfg.job.model),
        "tokenizer": os.path.abspath(tokenizer),
        "dataset": os.path.abspath(cfg.job.dataset),
        "total": total,
        "max_length": cfg.job.max_length,
        "hidden_size": info["hidden_size"],
        "num_layers": info["num_layers"],
        "dtype": cfg.job.dtype,
        "model_dtype": info["dtype"] if cfg.server.backend == "sglang" else cfg.server.dtype,
        "aux_layer_ids": aux,
        "aux_layer_source": aux_source,
        "layer_convention": layers.CONVENTION,
        "final_norm": layers.FINAL_NORM,
        "checksum": dump.CHECKSUM_ALGO,
        "shard_size": SHARD,
        "storage": cfg.job.storage,  # the mode files are written in now (not pinned: may change)
        "mantissa_bits": cfg.job.mantissa_bits,  # 7: exact bf16; fewer: rounded (lossy), pinned
    }


def shard_name(idx: int) -> str:
    g = idx // SHARD * SHARD
    return f"rows_{g}-{g + SHARD}"


def sample_path(out: str, idx: int, storage: str = "ckpt") -> str:
    return os.path.join(out, shard_name(idx), f"data_{idx}{dump.STORAGE[storage]}")


def find_sample(out: str, idx: int) -> str:
    """The committed file of ``idx`` in whichever storage mode it was written (the ``.ckpt``
    path when there is none)."""
    for storage in dump.STORAGE:
        path = sample_path(out, idx, storage)
        if os.path.exists(path):
            return path
    return sample_path(out, idx)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Plan:
    committed: set[int]
    failed: dict[int, dict]  # permanent failures, by idx
    remaining: list[int]
    orphans: list[int] = field(default_factory=list)  # files committed without a manifest line
    manifest: dict[int, dict] = field(default_factory=dict)  # only filled when asked


class Store:
    def __init__(self, out: str, rank: int | None = None, storage: str = "ckpt"):
        self.out = out
        self.storage = storage  # the mode commits write (dump.STORAGE)
        self.tmp = os.path.join(out, TMP_DIR) if rank is None else os.path.join(out, TMP_DIR, f"rank{rank}")
        self.manifest_path = os.path.join(out, jsonl.rank_file(MANIFEST, rank))
        self.failed_path = os.path.join(out, jsonl.rank_file(FAILED, rank))
        self._made: set[str] = set()
        self._settled: dict[str, int] = {}  # per open shard: committed + permanently failed
        self._lock = threading.Lock()  # commits run on worker threads
        self.total = 0  # set by plan(); 0 = do not write completion markers

    def description(self) -> dict | None:
        """dataset.json: what this output holds (None when absent or unreadable)."""
        return read_object(os.path.join(self.out, DESCRIPTION))

    def pin(self, desc: dict) -> None:
        """Write dataset.json, or refuse a run whose pinned keys differ from the one there."""
        path, out = os.path.join(self.out, DESCRIPTION), self.out
        if os.path.exists(path):
            try:
                with open(path) as f:
                    have = json.load(f)
            except (OSError, json.JSONDecodeError) as e:
                raise ConfigError(
                    f"{path} is unreadable ({e}); move it away only if the output is disposable"
                ) from None
            had = {k: have.get(k, PINNED_DEFAULTS.get(k)) for k in PINNED}
            diff = [k for k in PINNED if had[k] != desc.get(k, PINNED_DEFAULTS.get(k))]
            if diff:
                detail = "; ".join(f"{k}: {had[k]!r} -> {desc.get(k)!r}" for k in diff)
                hint = "use a new [job] out"
                if diff == ["mantissa_bits"] and desc.get("mantissa_bits", 7) < had["mantissa_bits"]:
                    hint += ", or round the samples there first (stop the job, hsx-runner compact)"
                raise ConfigError(f"{out} was written by a different job ({detail}); {hint}")
            if have.get("storage", "ckpt") == desc.get("storage", "ckpt"):
                return
            # the operator switched the storage mode: the files written so far keep theirs
            log.info("%s: storage %s -> %s", path, have.get("storage", "ckpt"), desc.get("storage"))
            desc = {**have, "storage": desc.get("storage")}
        write_atomic(path, json.dumps(desc, indent=1) + "\n")

    def prepare(self) -> int:
        """Create the layout and remove temp files left by a crash; returns how many."""
        os.makedirs(self.out, exist_ok=True)
        removed = 0
        if os.path.isdir(self.tmp):
            removed = len(os.listdir(self.tmp))
            shutil.rmtree(self.tmp)
        os.makedirs(self.tmp)
        jsonl.repair_tail(self.manifest_path)
        jsonl.repair_tail(self.failed_path)
        return removed

    def repair_tails(self) -> None:
        """Before appending outside a run (adopt): a torn last line must not swallow ours."""
        jsonl.repair_tail(self.manifest_path)
        jsonl.repair_tail(self.failed_path)

    # --- reading -------------------------------------------------------------------------
    def listing(self, skip: frozenset[str] = frozenset(), lo: int = 0, hi: int | None = None) -> set[int]:
        """Indices with a committed file: one listdir per shard directory not in skip (and
        overlapping [lo, hi) when given: a rank lists only its own shards)."""
        found: set[int] = set()
        try:
            shards = [e.name for e in os.scandir(self.out) if e.is_dir() and SHARD_RE.fullmatch(e.name)]
        except FileNotFoundError:
            return found
        for s in shards:
            if s in skip or not _overlaps(s, lo, hi):
                continue
            for name in os.listdir(os.path.join(self.out, s)):
                if name.startswith("data_"):
                    m = FILE_RE.fullmatch(name)
                    if m:
                        found.add(int(m.group(1)))
        return found

    def manifest_indices(self) -> set[int]:
        """Fast path: lines are written as {"idx":N,...}; one regex over the file, no JSON."""
        found: set[int] = set()
        for path in jsonl.all_files(self.out, MANIFEST):
            try:
                with open(path, "rb") as f:
                    found.update(map(int, _IDX_RE.findall(f.read())))
            except FileNotFoundError:
                pass
        return found

    def manifest(self) -> dict[int, dict]:
        """Full manifest, last line per index wins (verify uses it)."""
        out: dict[int, dict] = {}
        for rec in jsonl.read_all(self.out, MANIFEST, "written_at"):
            if isinstance(rec.get("idx"), int):
                out[rec["idx"]] = rec
        return out

    def adopted(self) -> set[int]:
        """Indices whose last manifest line marks them adopted (taken over from another tool's
        output by ``hsx-runner adopt``): counted apart from extracted ones. Files without an
        adopted line cost one substring search, so a job that never adopted pays nothing."""
        datas = []
        for path in jsonl.all_files(self.out, MANIFEST):
            try:
                with open(path, "rb") as f:
                    datas.append(f.read())
            except FileNotFoundError:
                continue
        if not any(_ADOPTED in d for d in datas):
            return set()
        last: dict[int, bool] = {}
        for data in datas:
            for m in _LINE_RE.finditer(data):
                last[int(m.group(1))] = _ADOPTED in m.group(0)
        return {i for i, a in last.items() if a}

    def failures(self) -> dict[int, dict]:
        out: dict[int, dict] = {}
        for rec in jsonl.read_all(self.out, FAILED, "at"):
            if isinstance(rec.get("idx"), int):
                if rec.get("requeued"):
                    out.pop(rec["idx"], None)
                else:
                    out[rec["idx"]] = rec
        return out

    def complete_shards(self) -> set[str]:
        try:
            return set(os.listdir(os.path.join(self.out, COMPLETE_DIR)))
        except FileNotFoundError:
            return set()

    def reopen(self, idx: int) -> None:
        """A settled sample is unsettled again (repair): its shard is listed at the next plan."""
        try:
            os.unlink(os.path.join(self.out, COMPLETE_DIR, shard_name(idx)))
        except FileNotFoundError:
            pass

    def plan(
        self, total: int, lo: int = 0, hi: int | None = None, away: frozenset[int] = frozenset()
    ) -> Plan:
        """Complete shards (marker written after their last manifest line) are not listed;
        the rest are listed and reconciled with the manifest. [lo, hi) restricts the plan
        to one rank's samples (the whole job by default). ``away``: committed samples out of
        their shard for a moment (the one a running compact is moving), listed all the same."""
        self.total = total
        hi = total if hi is None else min(hi, total)
        complete = {c for c in self.complete_shards() if _overlaps(c, lo, hi)}
        failures = self.failures()
        permanent_all = {i for i, r in failures.items() if r.get("permanent", True) and lo <= i < hi}
        listed = {i for i in self.listing(frozenset(complete), lo, hi) if lo <= i < hi}
        listed |= {i for i in away if lo <= i < hi}
        committed = set(listed)
        for name in complete:
            m = SHARD_RE.fullmatch(name)
            if m:
                g = int(m.group(1))
                committed.update(i for i in range(max(g, lo), min(g + SHARD, hi)) if i not in permanent_all)
        orphans = sorted(listed - self.manifest_indices()) if listed else []
        permanent = permanent_all - committed
        remaining = [i for i in range(lo, hi) if i not in committed and i not in permanent]
        self._settled = {}
        for i in listed | {i for i in permanent if shard_name(i) not in complete}:
            self._settled[shard_name(i)] = self._settled.get(shard_name(i), 0) + 1
        return Plan(committed, {i: failures[i] for i in permanent}, remaining, orphans)

    def _settle(self, idx: int) -> None:
        """Count a committed or permanently failed sample; mark its shard once all are."""
        if not self.total:
            return
        shard = shard_name(idx)
        with self._lock:
            n = self._settled.get(shard, 0) + 1
            self._settled[shard] = n
        g = idx // SHARD * SHARD
        if n == min(g + SHARD, self.total) - g:
            d = os.path.join(self.out, COMPLETE_DIR)
            os.makedirs(d, exist_ok=True)
            os.close(os.open(os.path.join(d, shard), os.O_CREAT | os.O_WRONLY, 0o644))

    # --- writing -------------------------------------------------------------------------
    def commit(
        self,
        idx: int,
        src: str,
        seq: int,
        nbytes: int,
        checksum: str,
        adopted: bool = False,
        writer: str = "",
        storage: str | None = None,
    ) -> str:
        """Record a complete, fsynced dump in the manifest, then rename it into its shard, named
        by ``storage`` (default: this store's mode; adopt names a file by what it holds).

        In this order a *.ckpt under the output is always a recorded sample (SpecForge trains on
        every one): a crash between the two leaves a line whose file is missing, and the listing,
        which is the truth, plans that sample again (its new line wins)."""
        shard = shard_name(idx)
        d = os.path.join(self.out, shard)
        if shard not in self._made:
            os.makedirs(d, exist_ok=True)
            self._made.add(shard)
        storage = storage or self.storage
        dst = sample_path(self.out, idx, storage)
        for other in dump.STORAGE:  # a sample written again in another mode: one name, never two
            if other != storage:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(sample_path(self.out, idx, other))
        # No directory fsync per sample: the data was fsynced before the rename, and a rename
        # lost to a power cut only means the sample is planned again (the listing is the truth).
        self.append_manifest(idx, seq, nbytes, checksum, shard, adopted, writer, storage)
        os.replace(src, dst)
        self._settle(idx)
        return dst

    def append_manifest(
        self,
        idx: int,
        seq: int,
        nbytes: int,
        checksum: str,
        shard: str,
        adopted: bool = False,
        writer: str = "",
        storage: str = "ckpt",
        mantissa_bits: int | None = None,
    ) -> None:
        rec = {
            "idx": idx,
            "seq": seq,
            "bytes": nbytes,
            "checksum": checksum,
            "shard": shard,
            "written_at": _now(),
        }
        if adopted:  # written by another tool, checked and taken over (runner.output.adopt)
            rec["adopted"] = True
        if writer:  # the server process that wrote it (one rank of several, say)
            rec["writer"] = writer
        if storage != "ckpt":  # the file's mode (lines without one are raw .ckpt)
            rec["storage"] = storage
        if mantissa_bits is not None:  # rounded by compact (extraction's follow dataset.json)
            rec["mantissa_bits"] = mantissa_bits
        jsonl.append(self.manifest_path, orjson.dumps(rec))

    def record_orphans(self, orphans: list[int]) -> None:
        """Files committed just before a crash lost their manifest line: record them now (an
        unusable one is removed, so its sample is extracted again)."""
        from ..codec.ckpt import CorruptSample

        for idx in orphans:
            path = find_sample(self.out, idx)
            try:
                self.adopt(idx)
            except (CorruptSample, KeyError, OSError) as e:
                log.warning("orphan %s unusable (%s): removing it to redo the sample", path, e)
                os.unlink(path)
        log.info("adopted %d committed files that had no manifest line", len(orphans))

    def mean_bytes(self, committed: set[int]) -> float | None:
        """The mean file size over a few committed samples in this store's storage mode (the
        disk projection's start: files of the other mode say little about the ones to come)."""
        sizes = []
        for idx in list(committed)[:40]:
            try:
                sizes.append(os.path.getsize(sample_path(self.out, idx, self.storage)))
            except OSError:
                pass
            if len(sizes) == 20:
                break
        return sum(sizes) / len(sizes) if sizes else None

    def adopt(self, idx: int) -> None:
        """Record a file committed just before a crash that lost its manifest line; raises
        CorruptSample or OSError when it does not load."""
        from ..codec.ckpt import load_sample, output_bound
        from ..codec.sink import file_checksum

        path = find_sample(self.out, idx)
        seq = int(load_sample(path, max_bytes=output_bound(self.description() or {}))["input_ids"].shape[0])
        storage = "ckpt.gz" if path.endswith(".gz") else "ckpt"
        self.append_manifest(
            idx, seq, os.path.getsize(path), file_checksum(path), shard_name(idx), storage=storage
        )

    def fail(self, idx: int, reason: str, attempts: int, permanent: bool = True) -> None:
        rec = {
            "idx": idx,
            "reason": reason[:2000],
            "attempts": attempts,
            "permanent": permanent,
            "at": _now(),
        }
        jsonl.append(self.failed_path, orjson.dumps(rec))
        if permanent:
            self._settle(idx)

    def requeue(self, idx: int, why: str) -> None:
        self.reopen(idx)
        jsonl.append(
            self.failed_path, orjson.dumps({"idx": idx, "requeued": True, "reason": why, "at": _now()})
        )


def _overlaps(shard: str, lo: int, hi: int | None) -> bool:
    m = SHARD_RE.fullmatch(shard)
    if not m:
        return False
    g = int(m.group(1))
    return g + SHARD > lo and (hi is None or g < hi)
