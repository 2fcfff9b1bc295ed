"""``hsx-runner adopt DIR``: take over an output another tool began, so it is not redone.

DIR holds SpecForge's own layout (``rows_{g}-{g+2000}/data_{idx}.ckpt``, a plain ``torch.save``
each) or loose ``.pt``/``.ckpt`` files whose name carries the dataset index (``data_12.pt``,
``12.pt``); it may be the job's own ``[job] out`` (files already in place, no manifest line) or
another directory at or below one of ``[job] adopt_roots`` (by default the folder that holds
``out``: the config, which chat cannot change, says where adopt may reach). Each file is checked by verify's one checker (loads; keys, shapes and the
job's dtype; ``input_ids`` equal to the dataset's tokens at that index; finite). A sound file
is recorded as the runner records a sample: its manifest line (marked ``"adopted": true``) is
written before it is renamed into ``rows_*/data_{idx}.ckpt``, so the output never holds a
``*.ckpt`` without a line. A bad file (and one whose index is outside the dataset: stray)
inside the job's output is moved to ``out/.quarantine/`` under a name ending in ``.bad``, where
SpecForge never reads it; one in another tree is reported and left where it is (that tree is
not ours to rearrange). Nothing is deleted. A ``.ckpt.gz`` is never ungzipped past the size a
sample of its row can have. Missing
indices are left for the job, which extracts only those (``hsx-runner run``/``resume``).

Good files are moved, not copied: a rename on the same filesystem; across filesystems a copy
(fsynced, under a temp name) that is recorded before the source is removed. The aux layers a
foreign file was extracted from cannot be seen in it: adopt trusts that they are the job's
(``dataset.json`` records them) and says so in its report."""

from __future__ import annotations

import errno
import os
import re
import shutil

import orjson

from ..contract.config import Config
from ..contract.errors import HsxError, LockedError
from ..contract.status import EVENTS, STATUS, Phase, StatusRecord, now_iso, read_record, write_record
from ..data import layers
from ..data.dataset import RowError, open_dataset
from .lock import JobLock, held_any
from .ranks import RunPaths
from .store import COMPLETE_DIR, TMP_DIR, Store, sample_path, shard_name
from .verify import QUARANTINE, check_contents, file_size, quarantine

# data_12.pt, 12.pt, sample_12.ckpt, data_12.ckpt.gz (SpecForge's --compress: gzip of a torch.save);
# ASCII digits, whole name (fullmatch), so epoch_3.pt or a name ending in a newline is no sample
NAME_RE = re.compile(r"(?:data_|sample_)?([0-9]+)\.(?:pt|ckpt)(\.gz)?\Z")
SUFFIXES = (".pt", ".ckpt", ".pt.gz", ".ckpt.gz")
SKIP_DIRS = frozenset({QUARANTINE, TMP_DIR, COMPLETE_DIR})  # hsx's own bookkeeping, never samples
MAX_LISTED = 10_000  # per report list: a huge directory of bad files must not make a huge reply


class AdoptRefused(HsxError):
    """adopt will not run: a bad DIR, or a runner holds the job."""


def check_dir(path: object) -> str:
    """An absolute, printable path (it arrives from chat or a terminal, as one argv element)."""
    if not isinstance(path, str) or not path:
        raise AdoptRefused("adopt needs a directory")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise AdoptRefused("the directory name contains NUL, newline or control characters")
    if not os.path.isabs(path):
        raise AdoptRefused(f"{path!r} is not an absolute path")
    return os.path.normpath(path)


def adopt(cfg: Config, src: str, progress=None) -> dict:
    """``progress(files_done, files, bytes)`` is called as it goes (adopt in the background)."""
    src, out, in_place = refusal_check(cfg, src)
    lock = JobLock(RunPaths(out).lock)
    lock.acquire()  # LockedError: a runner started just now
    try:
        return _Adopter(cfg, out, out if in_place else src, in_place, progress).run()
    finally:
        lock.release()


def refusal_check(cfg: Config, src: str) -> tuple[str, str, bool]:
    """What refuses an adopt before it starts (a bad DIR, untrusted code, a runner holding the
    job); returns (DIR, out, in place)."""
    out = os.path.abspath(cfg.job.out)
    src = check_dir(os.path.abspath(src) if isinstance(src, str) and src else src)
    if not os.path.isdir(src):
        raise AdoptRefused(f"{src} is not a directory" if os.path.exists(src) else f"{src} does not exist")
    in_place = os.path.exists(out) and os.path.samefile(src, out)
    roots = cfg.job.adopt_roots or [os.path.dirname(out)]
    if not in_place and not any(_inside(src, r) for r in roots):
        raise AdoptRefused(
            f"{src} is outside the directories adopt may take files from ({', '.join(roots)}); "
            f"add its folder to [job] adopt_roots in {cfg.path}"
        )
    if not in_place and _inside(out, src):
        raise AdoptRefused(f"{src} holds the job's output {out}; name the directory that holds the files")
    layers.check_remote_code(cfg.job)  # ConfigError, as run and start refuse it
    held = held_any(out)
    if held:
        raise LockedError(held[1], held[0])
    return src, out, in_place


def _inside(path: str, parent: str) -> bool:
    path, parent = os.path.realpath(path), os.path.realpath(parent)
    return path == parent or path.startswith(parent.rstrip("/") + "/")


class _Adopter:
    def __init__(self, cfg: Config, out: str, src: str, in_place: bool, progress=None):
        self.cfg, self.out, self.src, self.in_place = cfg, out, src, in_place
        self.progress = progress
        self.store = Store(out)
        self.adopted: list[int] = []
        self.bad: dict[int, str] = {}
        self.stray: list[int] = []
        self.already: list[int] = []
        self.unindexed: list[str] = []
        self.mask_differs: list[int] = []
        self.quarantined: list[dict] = []
        self.left: list[dict] = []  # not adopted, in a tree that is not the job's: reported only

    def run(self) -> dict:
        from .store import describe

        cfg, out = self.cfg, self.out
        info = layers.model_info(cfg.job.model)
        ds = open_dataset(cfg.job, info["vocab_size"])
        try:
            total = len(ds)
            aux, aux_source = layers.job_aux_ids(cfg.job, info)
            # the same dataset.json a run writes (or the same refusal when another job wrote one)
            self.desc = describe(cfg, info, aux, aux_source, total, cfg.job.tokenizer)
            self.store.pin(self.desc)
            os.makedirs(self.store.tmp, exist_ok=True)
            self.store.repair_tails()
            self.committed = self.store.listing() & self.store.manifest_indices()
            self.failures = self.store.failures()
            found = self._scan()
            nbytes = 0
            for n, idx in enumerate(sorted(found), 1):
                if self.progress:  # a stat per file only when someone watches the bytes
                    nbytes += sum(file_size(p) for p in found[idx])
                self._one(ds, idx, total, sorted(found[idx]))
                if self.progress:
                    self.progress(n, len(found), nbytes)
        finally:
            ds.close()
        permanent = {i for i, r in self.failures.items() if r.get("permanent", True)}
        done = self.committed | set(self.adopted)
        missing = [i for i in range(total) if i not in done and i not in found and i not in permanent]
        report = {
            "source": self.src,
            "out": out,
            "in_place": self.in_place,
            "total": total,
            "adopted": len(self.adopted),
            "adopted_idx": self.adopted[:MAX_LISTED],
            "bad": {str(i): r for i, r in sorted(self.bad.items())[:MAX_LISTED]},
            "stray": self.stray[:MAX_LISTED],
            "missing": missing[:MAX_LISTED],
            "missing_count": len(missing),
            "already": self.already[:MAX_LISTED],
            "unindexed": self.unindexed[:MAX_LISTED],
            "quarantined": self.quarantined[:MAX_LISTED],
            "left": self.left[:MAX_LISTED],
            "loss_mask_differs": self.mask_differs[:MAX_LISTED],
            "aux_layer_ids": aux,
            "note": f"files are taken to hold aux layers {aux} ({aux_source}); a file cannot show it",
        }
        self._record(report, len(done), len(permanent - done))
        return report

    # --- finding files -------------------------------------------------------------------
    def _scan(self) -> dict[int, list[str]]:
        """idx -> the files in DIR whose name carries it (any depth; symlinks not followed)."""
        found: dict[int, list[str]] = {}
        for d, dirs, names in os.walk(self.src):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
            for n in names:
                if not n.endswith(SUFFIXES):
                    continue
                p = os.path.join(d, n)
                m = NAME_RE.fullmatch(n)
                if m is None:
                    self.unindexed.append(p)
                    if self._under_out(p) and n.endswith((".ckpt", ".ckpt.gz")):  # SpecForge would read it
                        self._set_aside(p, None, "no dataset index in the file's name")
                    continue
                found.setdefault(int(m.group(1)), []).append(p)
        return found

    def _under_out(self, p: str) -> bool:
        return _inside(p, self.out)

    # --- one index -----------------------------------------------------------------------
    @staticmethod
    def _storage(p: str) -> str:
        """What the file holds decides its committed name, not what it is called."""
        from ..codec.sink import is_gzip

        try:
            return "ckpt.gz" if is_gzip(p) else "ckpt"
        except OSError:
            return "ckpt"

    def _home(self, p: str, idx: int) -> str:
        return sample_path(self.out, idx, self._storage(p))

    def _one(self, ds, idx: int, total: int, paths: list[str]) -> None:
        if idx >= total:
            for p in paths:
                self._set_aside(p, idx, f"stray: index {idx} is outside the dataset ({total} rows)")
            self.stray.append(idx)
            return
        if idx in self.committed:  # the job has it already; its own file is verify's business
            for p in paths:
                if os.path.abspath(p) != self._home(p, idx) and self._under_out(p):
                    self._set_aside(p, idx, "a second copy of a sample the job already holds")
            self.already.append(idx)
            return
        try:
            want = ds.get(idx)
        except RowError as e:
            for p in paths:
                self._set_aside(p, idx, f"the dataset row is unusable ({e})")
            self.bad[idx] = f"the dataset row is unusable ({e})"
            return
        reasons = []
        for p in sorted(paths, key=lambda p: p != self._home(p, idx)):  # a file in place is tried first
            if idx in self.adopted:
                self._set_aside(p, idx, f"a second file for sample {idx}")
                continue
            reason = self._check(p, want.input_ids)
            if reason is None:
                reason = self._take(p, idx, want.loss_mask)
            if reason is not None:
                self._set_aside(p, idx, reason)
                reasons.append(reason if len(paths) == 1 else f"{os.path.basename(p)}: {reason}")
        if idx not in self.adopted:
            self.bad[idx] = "; ".join(reasons)

    def _check(self, p: str, want_ids: list[int]) -> str | None:
        if os.path.islink(p):
            return "a symbolic link (adopt takes the files themselves)"
        return check_contents(p, want_ids, None, self.desc, quick=False)

    def _take(self, p: str, idx: int, want_mask: list[int]) -> str | None:
        """Record a checked file and move it into its shard; the line comes first."""
        from ..codec.ckpt import CorruptSample, load_sample, output_bound
        from ..codec.sink import file_checksum

        try:
            t = load_sample(p, max_bytes=output_bound(self.desc, len(want_mask)))
            seq = int(t["input_ids"].shape[0])
            if t["loss_mask"].tolist() != want_mask:
                self.mask_differs.append(idx)  # the earlier tool's mask: reported, kept
            del t
        except (CorruptSample, OSError) as e:  # it changed since the check
            return f"does not load: {e}"
        storage = self._storage(p)
        if os.path.abspath(p) == sample_path(self.out, idx, storage):  # in place: only the line was missing
            self.store.append_manifest(
                idx, seq, os.path.getsize(p), file_checksum(p), shard_name(idx), adopted=True, storage=storage
            )
        elif os.stat(p).st_dev == os.stat(self.out).st_dev and self._commit_rename(idx, p, seq, storage):
            pass
        else:  # another filesystem: copy beside the output under a temp name, record, then drop the source
            part = os.path.join(self.store.tmp, f"adopt-{idx}.part")
            _copy_synced(p, part)
            self.store.commit(
                idx, part, seq, os.path.getsize(part), file_checksum(part), adopted=True, storage=storage
            )
            os.unlink(p)
        if idx in self.failures:
            self.store.requeue(idx, f"adopted from {self.src}")
        self.store.reopen(idx)
        self.adopted.append(idx)
        return None

    def _commit_rename(self, idx: int, p: str, seq: int, storage: str) -> bool:
        from ..codec.sink import file_checksum

        try:  # the line, then os.replace: a crash between leaves the file where it was
            self.store.commit(
                idx, p, seq, os.path.getsize(p), file_checksum(p), adopted=True, storage=storage
            )
        except OSError as e:
            if e.errno != errno.EXDEV:  # a bind mount: same st_dev is not always one filesystem
                raise
            return False
        return True

    def _set_aside(self, p: str, idx: int | None, reason: str) -> None:
        """A file that will not be adopted: in the job's output, moved where SpecForge never
        reads it (kept); anywhere else, reported and left alone."""
        if not self._under_out(p):
            self.left.append({"idx": idx, "path": p, "reason": reason})
            return
        stem = f"adopt_{os.path.basename(os.path.dirname(p))}_{os.path.basename(p)}"
        dst = quarantine(self.out, p, stem)
        self.quarantined.append({"idx": idx, "path": p, "to": dst, "reason": reason})

    # --- the record ----------------------------------------------------------------------
    def _record(self, report: dict, done: int, failed: int) -> None:
        """status.json and events.jsonl say what happened; the next run's plan replaces the counts."""
        path = os.path.join(self.out, STATUS)
        try:
            rec, fresh = read_record(path), False
        except HsxError:
            rec, fresh = StatusRecord(job=self.cfg.job.name), True
        rec.total, rec.done, rec.failed = report["total"], done, failed
        rec.adopted = len(self.store.adopted())
        rec.alive, rec.pid = False, None
        rec.rate = rec.tokens_per_s = rec.eta_s = rec.rate_trend = None
        rec.heartbeat_at = now_iso()
        rec.disk.path = self.out
        try:
            u = shutil.disk_usage(self.out)
            rec.disk.used, rec.disk.free = u.used, u.free
        except OSError:
            pass
        left = report["total"] - done - failed
        if report["adopted"] or rec.phase.is_active() or fresh:
            rec.phase = Phase.DONE if left <= 0 else Phase.STOPPED
            rec.reason = f"adopted {report['adopted']:,} samples from {self.src}" + (
                f"; resume to extract the other {left:,}" if left > 0 else ""
            )
            rec.phase_since = rec.heartbeat_at
        write_record(path, rec)
        event = {
            "t": now_iso(),
            "event": "adopted",
            "source": self.src,
            "adopted": report["adopted"],
            "bad": len(self.bad),
            "stray": len(self.stray),
            "missing": report["missing_count"],
        }
        with open(os.path.join(self.out, EVENTS), "ab") as f:
            f.write(orjson.dumps(event) + b"\n")


def _copy_synced(src: str, dst: str) -> None:
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        shutil.copyfileobj(fi, fo, 8 << 20)
        fo.flush()
        os.fsync(fo.fileno())


def summary_text(report: dict) -> str:
    """The terse answer of ``hsx-runner adopt`` without --json."""
    bad, stray = report["bad"], report["stray"]
    head = (
        f"adopted {report['adopted']:,} of {report['total']:,} from {report['source']}; "
        f"{len(bad):,} bad, {len(stray):,} stray, "
        f"{report['missing_count']:,} missing (the job extracts them)"
    )
    lines = [head] + [f"  bad {i}: {r}" for i, r in list(bad.items())[:20]]
    if report["quarantined"]:
        lines.append(f"moved out of the job's reach into {QUARANTINE}/: {len(report['quarantined']):,}")
    if report.get("left"):
        lines.append(
            f"not adopted, left in place in {report['source']}: {len(report['left']):,} (--json lists them)"
        )
    if len(bad) > 20:
        lines.append(f"  … {len(bad) - 20:,} more (--json lists them)")
    if report["already"]:
        lines.append(f"already in the job, left alone: {len(report['already']):,}")
    if report["loss_mask_differs"]:
        lines.append(
            f"adopted with a loss_mask unlike this job's: {len(report['loss_mask_differs']):,} "
            f"(e.g. {report['loss_mask_differs'][0]})"
        )
    return "\n".join(lines)
