"""``hsx-runner compact``: re-encode an output in place to the job's [job] storage and, when
[job] mantissa_bits asks for fewer bits than the output holds, round it: room made on a full
disk without extracting anything again, while the job runs or not (rounding needs it stopped).

One sample at a time, so it needs room for one sample's new file, not a second output:

1. the new bytes go to ``.compact/<idx>.part`` (a name SpecForge does not list), fsynced, and
   are proven to be the sample: the source's checksum equals the manifest's, and the part reads
   back to the same plain bytes (lossless) or the same tensors rounded (mantissa bits);
2. ``.compact/inflight.json`` records the index, the mode it leaves and the manifest line to
   come (atomic write); every file name is derived from the index and the store's layout, never
   read from the journal, so an edited journal cannot move anything but that sample's files;
3. the old file is renamed to ``.compact/<idx>.old``: the sample leaves SpecForge's view;
4. the manifest line is appended (the last line of an index wins);
5. the part is renamed to the sample's name in the new mode (``data_7.ckpt.gz``): it is back;
6. the old bytes and the journal are removed.

Every step is one atomic call and can be run again, so a killed compact's half commit is
finished by the next compact or the job's next start (``finish``). Kill -9 anywhere loses
nothing (a proven copy exists at every point) and never shows SpecForge a sample twice or a
file its name does not describe; between 3 and 5 (two renames apart, or until a killed
compact's commit is finished) the one sample is absent instead.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import errno
import json
import logging
import os

from ..codec.sink import file_checksum, is_gzip, recode
from ..contract.atomic import fsync_path, write_atomic
from ..contract.config import Config
from ..contract.dump import BF16_MANTISSA_BITS, STORAGE
from ..contract.errors import HsxError, LockedError
from . import lock
from .store import DESCRIPTION, PINNED_DEFAULTS, Store, sample_path, shard_name
from .verify import scan

log = logging.getLogger("hsx.compact")
DIR = ".compact"
JOURNAL = "inflight.json"
LOCK = "lock"
PART = ".part"  # the new bytes, before they take the sample's place
PARK = ".old"  # the old bytes, for the two renames between leaving and coming back
WORKERS = 2  # samples encoded at once; commits stay on one thread, in order
AHEAD = 2 * WORKERS


class CompactRefused(HsxError):
    """Nothing was changed; the reason says what to do."""


class JournalRefused(HsxError):
    """The journal names something other than one sample of this output: nothing is done."""


class Skip(Exception):
    """This sample stays as it is (the reason goes in the report)."""


def _target(cfg: Config, desc: dict) -> tuple[str, int, bool]:
    """(storage, mantissa bits, rounding) to re-encode to, or refuse."""
    have = desc.get("mantissa_bits", PINNED_DEFAULTS["mantissa_bits"])
    bits = cfg.job.mantissa_bits
    if bits > have:
        raise CompactRefused(
            f"the output holds {have} mantissa bits; [job] mantissa_bits = {bits} cannot bring back "
            "what rounding dropped"
        )
    return cfg.job.storage, bits, bits < have


def _runner_holds(out: str) -> int | None:
    """The pid of a runner holding the job (this box's or a rank's lock), else None."""
    names = [lock.NAME] + [n for n in os.listdir(out) if n.startswith(lock.NAME + ".rank")]
    for name in names:
        held, pid = lock.is_held_at(os.path.join(out, name))
        if held:
            return pid or -1
    return None


def compact(cfg: Config, progress=None) -> dict:
    """``progress(files_done, files, bytes_read, freed=...)`` is called as it goes."""
    out = cfg.job.out
    store = Store(out, storage=cfg.job.storage)
    desc = store.description()
    if desc is None:
        raise CompactRefused(f"{out} holds no output of this job ({DESCRIPTION} is missing)")
    storage, bits, rounding = _target(cfg, desc)
    if rounding and (pid := _runner_holds(out)):
        raise CompactRefused(
            f"rounding to {bits} mantissa bits needs the job stopped, and a runner holds it (pid {pid}); "
            "stop it first (compacting to another storage mode alone runs beside it)"
        )
    os.makedirs(os.path.join(out, DIR), exist_ok=True)
    guard = lock.JobLock(os.path.join(out, DIR, LOCK))
    try:
        guard.acquire()
    except LockedError as e:
        raise CompactRefused(f"another compact runs (pid {e.pid})") from None
    try:
        try:
            finish(out)
        except JournalRefused as e:
            raise CompactRefused(str(e)) from None
        for name in os.listdir(os.path.join(out, DIR)):
            if name.endswith((PART, PARK)):  # not in the journal: the sample's file holds it whole
                os.unlink(os.path.join(out, DIR, name))
        if desc.get("storage", "ckpt") != storage:
            write_atomic(
                os.path.join(out, DESCRIPTION), json.dumps({**desc, "storage": storage}, indent=1) + "\n"
            )
        if rounding:  # many small torch ops per sample: threads fight the workers (bench.write_path)
            import torch

            torch.set_num_threads(1)
        report = _run(out, store, storage, bits, rounding, progress)
        if rounding and not report["skipped"] and not _runner_holds(out):
            # every sample is rounded now: the output holds these bits, and verify checks them
            desc = store.description() or desc
            write_atomic(
                os.path.join(out, DESCRIPTION), json.dumps({**desc, "mantissa_bits": bits}, indent=1) + "\n"
            )
            report["pinned_bits"] = bits
        return report
    finally:
        guard.release()


def _run(out: str, store: Store, storage: str, bits: int, rounding: bool, progress) -> dict:
    manifest = store.manifest()
    work, skipped, already = [], {}, 0
    for idx, paths in sorted(scan(out).items()):
        entry = manifest.get(idx)
        if len(paths) > 1:
            skipped[str(idx)] = f"present {len(paths)} times (hsx-runner verify --repair)"
        elif entry is None:
            skipped[str(idx)] = "no manifest line yet (the next run or verify --repair records it)"
        elif paths[0] not in {sample_path(out, idx, s) for s in STORAGE}:  # the journal derives its names
            skipped[str(idx)] = f"not in its shard: {paths[0]} (hsx-runner verify --repair)"
        elif paths[0].endswith(STORAGE[storage]) and not (rounding and entry.get("mantissa_bits", 99) > bits):
            already += 1
        else:
            work.append((idx, paths[0], entry))
    report = {
        "storage": storage, "mantissa_bits": bits, "files": len(work) + already + len(skipped),
        "recoded": 0, "already": already, "skipped": skipped, "bytes_before": 0, "bytes_after": 0, "freed": 0,
    }  # fmt: skip
    done = read = 0
    if progress:
        progress(0, len(work), 0, freed=0)
    with concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="compact") as pool:
        # a few samples ahead, never all: each part takes disk, and the disk may be nearly full
        ahead = collections.deque()
        for item in work:
            ahead.append((item, pool.submit(_encode, out, *item, storage, bits, rounding)))
            if len(ahead) > AHEAD:
                read += _settle(out, store, storage, report, *ahead.popleft())
                done += 1
                if progress:
                    progress(done, len(work), read, freed=report["freed"])
        while ahead:
            read += _settle(out, store, storage, report, *ahead.popleft())
            done += 1
            if progress:
                progress(done, len(work), read, freed=report["freed"])
    report["complete"] = not skipped
    return report


def _settle(out: str, store: Store, storage: str, report: dict, item: tuple, fut) -> int:
    """Commit one encoded sample, or note why it stays; returns the bytes it read."""
    idx, path, _ = item
    try:
        part, line = fut.result()
        before = os.path.getsize(path)
        _commit(out, store, idx, path, part, line, storage)
    except Skip as why:
        report["skipped"][str(idx)] = str(why)
        return 0
    except OSError as e:
        if e.errno == errno.ENOSPC:  # every sample after it would fail the same way
            raise HsxError(
                f"disk full at {out}: compact needs room for one sample's new file beside the old; "
                "free a little space and run it again (it resumes)"
            ) from None
        report["skipped"][str(idx)] = f"{type(e).__name__}: {e}"
        return 0
    except ValueError as e:
        report["skipped"][str(idx)] = str(e)
        return 0
    report["recoded"] += 1
    report["bytes_before"] += before
    report["bytes_after"] += line["bytes"]
    report["freed"] += before - line["bytes"]
    return before


def _part(out: str, idx: int) -> str:
    return os.path.join(out, DIR, f"{idx}{PART}")


def _encode(out: str, idx: int, path: str, entry: dict, storage: str, bits: int, rounding: bool):
    """Step 1 (on a worker thread): the part, proven to hold this sample; its manifest line."""
    part, compress = _part(out, idx), storage == "ckpt.gz"
    if rounding:
        nbytes, checksum = _round(path, part, entry, compress, bits)
    elif is_gzip(path) == compress:  # the bytes are in the new mode already (a journal lost with its disk)
        raise Skip(f"holds {storage} bytes under the name {os.path.basename(path)} (rename it by hand)")
    else:
        src, nbytes, checksum = recode(path, part, compress)
        if src != entry.get("checksum"):
            os.unlink(part)
            raise Skip("checksum differs from the manifest (hsx-runner verify --repair re-extracts it)")
    line = {k: entry[k] for k in ("idx", "seq", "adopted", "writer") if k in entry}
    line |= {"bytes": nbytes, "checksum": checksum, "storage": storage, "shard": shard_name(idx)}
    if bits < BF16_MANTISSA_BITS:
        line["mantissa_bits"] = bits
    return part, line


def _round(path: str, part: str, entry: dict, compress: bool, bits: int) -> tuple[int, str]:
    """Rounding: the tensors loaded, rounded, written and loaded back equal to what was meant."""
    import torch

    from ..codec.ckpt import KEYS, load_sample, write_sample
    from ..codec.precision import round_mantissa

    if file_checksum(path) != entry.get("checksum"):
        raise Skip("checksum differs from the manifest (hsx-runner verify --repair re-extracts it)")
    t = load_sample(path)
    nbytes, checksum = write_sample(part, **{k: t[k] for k in KEYS}, compress=compress, mantissa_bits=bits)
    back = load_sample(part)
    for k in KEYS:
        want = round_mantissa(t[k], bits) if k.endswith("hidden_state") else t[k]
        if not torch.equal(back[k], want):
            os.unlink(part)
            raise ValueError(f"{part}: {k} reads back different from what was written")
    return nbytes, checksum


def _commit(out: str, store: Store, idx: int, path: str, part: str, line: dict, storage: str) -> None:
    """Steps 2 to 6 (one thread)."""
    if not os.path.exists(path):  # gone meanwhile (verify --repair quarantined it): leave it gone
        os.unlink(part)
        raise Skip("its file went away while compacting (quarantined?)")
    src = next(s for s in STORAGE if path == sample_path(out, idx, s))  # scan found it by that name
    rec = {"idx": idx, "from": src, "line": line}
    write_atomic(os.path.join(out, DIR, JOURNAL), json.dumps(rec) + "\n")
    _roll_forward(out, store, _files(out, rec), recovering=False)


def _files(out: str, rec: object) -> dict:
    """The journal's files, derived from its index and modes by the store's layout; JournalRefused
    when it is not one sample of this output (a journal of an older hsx, which wrote the paths,
    passes when they are those)."""
    line = rec.get("line") if isinstance(rec, dict) else None
    idx = line.get("idx") if isinstance(line, dict) else None
    if type(idx) is not int or idx < 0:
        raise JournalRefused("it names no sample index")
    if line.get("storage") not in STORAGE or line.get("shard") != shard_name(idx):
        raise JournalRefused(f"its manifest line for sample {idx} names another mode or shard")
    if not all(type(line.get(k)) is int for k in ("seq", "bytes")) or not isinstance(
        line.get("checksum"), str
    ):
        raise JournalRefused(f"its manifest line for sample {idx} is malformed")
    legacy = rec.get("src")
    src = rec.get("from") or next((s for s in STORAGE if legacy == sample_path(out, idx, s)), None)
    if src not in STORAGE or rec.get("idx", idx) != idx:
        raise JournalRefused(f"it names {legacy!r}, not sample {idx}'s file in {out}")
    files = {"part": _part(out, idx), "src": sample_path(out, idx, src), "park": _park(out, idx),
             "new": sample_path(out, idx, line["storage"]), "line": line}  # fmt: skip
    for key in ("part", "src", "park", "new"):
        if key in rec and rec[key] != files[key]:
            raise JournalRefused(f"it names {rec[key]!r} where sample {idx}'s is {files[key]!r}")
    return files


def _park(out: str, idx: int) -> str:
    return os.path.join(out, DIR, f"{idx}{PARK}")


def _roll_forward(out: str, store: Store, rec: dict, recovering: bool) -> None:
    """The journal's steps (on the files ``_files`` derived), each one idempotent, so a killed
    compact's are finished by running them again; a proven copy of the sample exists at every point."""
    part, src, park, new, line = rec["part"], rec["src"], rec["park"], rec["new"], rec["line"]
    if os.path.exists(part) and os.path.exists(src):
        os.replace(src, park)  # the sample leaves discovery ...
    if not recovering or store.manifest().get(line["idx"], {}).get("checksum") != line["checksum"]:
        _append_line(store, line)
    if os.path.exists(part):
        os.replace(part, new)  # ... and comes back in its new form
        fsync_path(os.path.dirname(new))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(park)
    os.unlink(os.path.join(out, DIR, JOURNAL))


def _append_line(store: Store, line: dict) -> None:
    store.append_manifest(
        line["idx"], line["seq"], line["bytes"], line["checksum"], line["shard"],
        adopted=bool(line.get("adopted")), writer=str(line.get("writer") or ""), storage=line["storage"],
        mantissa_bits=line.get("mantissa_bits"),
    )  # fmt: skip


def finish(out: str) -> str | None:
    """Finish the commit a killed compact left half done; returns what it did (None: nothing).
    Callers hold the compact lock, or saw it free (a job's start). JournalRefused, with nothing
    done, for a journal that is not one sample of this output."""
    journal = os.path.join(out, DIR, JOURNAL)
    try:
        with open(journal) as f:
            rec = _files(out, json.load(f))  # written atomically: whole, or not there
    except FileNotFoundError:
        return None
    except ValueError as e:  # not JSON
        raise JournalRefused(f"{journal} is unreadable ({e}); look at it, then remove it") from None
    except JournalRefused as e:
        raise JournalRefused(f"{journal}: {e}; nothing was moved: look at it, then remove it") from None
    if not os.path.exists(rec["part"]) and not os.path.exists(rec["park"]):
        os.unlink(journal)  # all done but the journal's removal
        return None
    _roll_forward(out, Store(out), rec, recovering=True)
    did = f"sample {rec['line']['idx']}: finished the commit a killed compact left ({os.path.basename(rec['new'])})"
    log.info("compact journal: %s", did)
    return did


def away(out: str) -> frozenset[int]:
    """The sample a running compact has out of its shard now (for a plan made meanwhile)."""
    try:
        with open(os.path.join(out, DIR, JOURNAL)) as f:
            return frozenset({int(json.load(f)["line"]["idx"])})
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()


def finish_unless_running(out: str) -> str | None:
    """A job's start: finish a killed compact's commit, unless a compact is running (it owns
    its journal) or another rank is at it."""
    if not os.path.exists(os.path.join(out, DIR, JOURNAL)):
        return None
    guard = lock.JobLock(os.path.join(out, DIR, LOCK))
    try:
        guard.acquire()
    except LockedError:
        return None
    try:
        return finish(out)
    except JournalRefused as e:  # the job goes on; a sample the journal held away is planned again
        log.warning("compact journal passed over: %s", e)
        return None
    finally:
        guard.release()
