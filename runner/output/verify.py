"""``hsx-runner verify``: every sample present exactly once, loadable, shaped and typed by
the contract, equal to the dataset's tokens, finite, and matching its manifest checksum.
``--repair`` moves corrupt files to ``.quarantine/`` (nothing is deleted) and re-queues them."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import shutil
from collections import defaultdict

from ..contract.config import Config
from ..data import layers
from ..data.dataset import RowError, open_dataset
from .store import FILE_RE, PINNED_DEFAULTS, SHARD_RE, Store, shard_name

QUARANTINE = ".quarantine"
QUARANTINE_SUFFIX = ".bad"


def quarantine(out: str, path: str, stem: str) -> str:
    """Move ``path`` into ``out/.quarantine`` as ``stem.bad`` (``stem.2.bad``, ... when taken);
    never over an earlier file: a hard link claims the name or fails, then the source goes."""
    qdir = os.path.join(out, QUARANTINE)
    os.makedirs(qdir, exist_ok=True)
    n = 1
    while True:
        dst = os.path.join(qdir, (stem if n == 1 else f"{stem}.{n}") + QUARANTINE_SUFFIX)
        n += 1
        try:
            os.link(path, dst)
        except FileExistsError:
            continue
        except OSError:  # no hard links here (or another filesystem): look, then move
            if os.path.lexists(dst):
                continue
            shutil.move(path, dst)
            return dst
        os.unlink(path)
        return dst


def file_size(p: str) -> int:
    """Bytes of a file, 0 if it is gone (progress counting only)."""
    try:
        return os.path.getsize(p)
    except OSError:
        return 0


def scan(out: str) -> dict[int, list[str]]:
    """idx -> every path holding it (more than one, or the wrong shard, is a defect)."""
    found: dict[int, list[str]] = defaultdict(list)
    if not os.path.isdir(out):
        return found
    for e in os.scandir(out):
        if e.is_dir() and SHARD_RE.fullmatch(e.name):
            for name in os.listdir(e.path):
                m = FILE_RE.fullmatch(name)
                if m:
                    found[int(m.group(1))].append(os.path.join(e.path, name))
    return found


def check_sample(
    path: str, idx: int, want_ids: list[int] | None, entry: dict | None, desc: dict, quick: bool
) -> str | None:
    """The reason this file is unsound, or None. Without a manifest ``entry`` (a crash between
    the rename and the line) only the contents are checked."""
    if os.path.basename(os.path.dirname(path)) != shard_name(idx):
        return f"in the wrong shard ({path})"
    return check_contents(path, want_ids, entry, desc, quick)


def check_contents(
    path: str, want_ids: list[int] | None, entry: dict | None, desc: dict, quick: bool
) -> str | None:
    """check_sample without the place: a file still to be renamed into its shard (adopt)."""
    from ..codec.ckpt import CorruptSample, check_tensors, load_sample, output_bound
    from ..codec.sink import file_checksum

    if entry is not None:
        size = os.path.getsize(path)
        if size != entry.get("bytes"):
            return f"size {size} != manifest {entry.get('bytes')}"
        if not quick and file_checksum(path) != entry.get("checksum"):
            return "checksum differs from the manifest"
    try:
        t = load_sample(path, max_bytes=output_bound(desc, None if want_ids is None else len(want_ids)))
    except CorruptSample as e:
        return f"does not load: {e}"
    seq = t["input_ids"].shape[0]
    if entry is not None and seq != entry.get("seq"):
        return f"seq {seq} != manifest {entry.get('seq')}"
    finite = entry is None or not quick
    bits = desc.get("mantissa_bits", PINNED_DEFAULTS["mantissa_bits"])
    return check_tensors(t, desc["hidden_size"], desc.get("dtype"), want_ids, finite, bits)


WORKERS = 4  # files read and checked at once: reads, checksums and loads overlap
AHEAD = 4 * WORKERS


def verify(cfg: Config, repair: bool = False, quick: bool = False, progress=None) -> dict:
    """``progress(files_done, total, bytes_read)`` is called as it goes (background verify).
    The verdict is kept (runner.output.verified) with the output's identity from before the
    scan: a change while it runs leaves it stale, never wrongly fresh."""
    from .verified import identity, save

    out = cfg.job.out
    before = identity(out)
    store = Store(out)
    info = layers.model_info(cfg.job.model)
    desc = store.description() or {
        "hidden_size": info["hidden_size"],
        "dtype": cfg.job.dtype,
        "max_length": cfg.job.max_length,
    }
    ds = open_dataset(cfg.job, info["vocab_size"])
    total = len(ds)
    manifest = store.manifest()
    failures = store.failures()
    found = scan(out)
    ok, missing, failed, unrecorded = 0, [], [], []
    corrupt: dict[int, str] = {}
    nbytes = 0

    def settle(idx: int, fut) -> None:
        nonlocal ok
        reason, entry = fut.result(), manifest.get(idx)
        if reason:
            corrupt[idx] = reason + ("" if entry else " (and no manifest line)")
        elif entry is None:
            unrecorded.append(idx)  # sound; the next run (or --repair) records it
        else:
            ok += 1

    # The dataset is read here (it is not thread-safe); files are checked on a few threads.
    pending: collections.deque = collections.deque()
    with concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="verify") as pool:
        for idx in range(total):
            paths = found.get(idx, [])
            if not paths:
                (failed if idx in failures and failures[idx].get("permanent", True) else missing).append(idx)
            elif len(paths) > 1:
                corrupt[idx] = f"present {len(paths)} times: {paths}"
            else:
                try:
                    want = ds.get(idx).input_ids
                except RowError as e:
                    corrupt[idx] = f"committed, but the dataset row is unusable now ({e})"
                else:
                    if progress:  # a stat per file only when someone watches the bytes
                        nbytes += file_size(paths[0])
                    fut = pool.submit(check_sample, paths[0], idx, want, manifest.get(idx), desc, quick)
                    pending.append((idx, fut))
            while len(pending) > AHEAD or (pending and pending[0][1].done()):
                settle(*pending.popleft())
            if progress:
                progress(idx + 1 - len(pending), total, nbytes)
        while pending:
            settle(*pending.popleft())
    if progress:
        progress(total, total, nbytes)
    stray = sorted(i for i in found if i >= total)
    ds.close()
    repaired = []
    if repair:
        for idx in list(corrupt) + stray:
            for p in found.get(idx, []):
                # ".bad": SpecForge trains on every *.ckpt under the output directory
                quarantine(out, p, f"{os.path.basename(os.path.dirname(p))}_{os.path.basename(p)}")
            store.requeue(idx, f"verify --repair: {corrupt.get(idx, 'stray')}")
            repaired.append(idx)
        for idx in missing:
            if idx in failures:
                store.requeue(idx, "verify --repair: missing")
            else:
                store.reopen(idx)  # its shard may be marked complete: list it again
            repaired.append(idx)
        for idx in unrecorded:
            store.adopt(idx)
            repaired.append(idx)
    report = {
        "total": total,
        "ok": ok,
        "missing": missing,
        "corrupt": sorted(corrupt),
        "failed": failed,
        "unrecorded": unrecorded,
        "reasons": {str(k): v for k, v in sorted(corrupt.items())},
        "failed_reasons": {str(i): failures[i].get("reason") for i in failed},
        "stray": stray,
        "repaired": repaired,
        "quick": quick,
        "complete": ok == total and not stray,
    }
    if os.path.isdir(out):
        save(out, report, before)
    return report
