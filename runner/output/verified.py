"""verify's verdict, kept: ``OUT/verify.json`` holds the last verify's counts with the output's
identity as it was when that verify began, so a training start can tell features verified as
they are now from features changed since (an extraction's new samples, a compact, an adopt,
a repair, a file rewritten in place).

The identity is every feature file SpecForge would train on (each ``.ckpt`` / ``.ckpt.gz``
below OUT: its path, size and mtime), and the manifests, failure lists and dataset.json the
verdict read: stats only, so it costs a walk of the tree, never a read of the data."""

from __future__ import annotations

import hashlib
import json
import os

from ..contract.atomic import write_atomic
from ..contract.status import now_iso
from . import jsonl
from .store import DESCRIPTION, FAILED, MANIFEST

RECORD = "verify.json"
FIX = "run hsx-runner verify (/extract verify): it checks every sample and keeps the result"


def identity(out: str) -> dict:
    """{files, bytes, digest}: the feature files SpecForge trains on and the records verify read."""
    rows, files, nbytes = [], 0, 0
    for d, dirs, names in os.walk(out):
        dirs.sort()
        for n in sorted(names):
            if n.endswith((".ckpt", ".ckpt.gz")):
                p = os.path.join(d, n)
                try:
                    st = os.stat(p)
                except FileNotFoundError:  # gone between the listing and the stat
                    continue
                files += 1
                nbytes += st.st_size
                rows.append(f"{os.path.relpath(p, out)}\0{st.st_size}\0{st.st_mtime_ns}")
    records = jsonl.all_files(out, MANIFEST) + jsonl.all_files(out, FAILED) + [os.path.join(out, DESCRIPTION)]
    for p in records:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        rows.append(f"{os.path.basename(p)}\0{st.st_size}\0{st.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    return {"files": files, "bytes": nbytes, "digest": digest}


def save(out: str, report: dict, ident: dict) -> None:
    """The verdict of a verify that began when the output was ``ident``."""
    keep = {k: report.get(k) for k in ("total", "ok", "complete", "quick")}
    counts = {k: len(report.get(k) or []) for k in ("missing", "corrupt", "failed", "unrecorded", "stray")}
    rec = {"at": now_iso(), **keep, **counts, "identity": ident}
    write_atomic(os.path.join(out, RECORD), json.dumps(rec, indent=1) + "\n", 0o644)


def read(out: str) -> dict | None:
    try:
        with open(os.path.join(out, RECORD)) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and isinstance(d.get("identity"), dict) else None


def check(out: str) -> tuple[bool, str, str]:
    """(verified, what the record says, the fix): the last verify was full and found every
    sample sound or failed with a reason, and the output is what it was when that verify began."""
    saved = read(out)
    if saved is None:
        return False, f"no verify result kept in {out} (or it is unreadable)", FIX
    at = saved.get("at") or "?"
    if saved.get("quick"):
        return (
            False,
            f"the last verify ({at}) was --quick: it checked no checksums or values",
            FIX + " without --quick",
        )
    bad = ", ".join(
        f"{saved.get(k)} {k}" for k in ("missing", "corrupt", "stray", "unrecorded") if saved.get(k)
    )
    if bad:  # samples failed with a reason are no defect: they are not in the tree
        why = f"the last verify ({at}) found {saved.get('ok')} / {saved.get('total')} sound ({bad})"
        return (
            False,
            why,
            "hsx-runner verify --repair re-queues them, resume the extraction, then verify again",
        )
    was, now = saved["identity"], identity(out)
    if was.get("digest") != now["digest"]:
        if was.get("files") != now["files"]:
            what = f"{was.get('files')} → {now['files']} feature files"
        else:
            what = f"the same {now['files']} feature files, but sizes, times or the manifest changed"
        return False, f"the output changed since the last verify ({at}): {what}", FIX + " again"
    if now["files"] != saved.get("ok"):  # a feature file outside the shards: SpecForge trains on it too
        why = f"{now['files']} feature files under {out}, but verify found {saved.get('ok')} samples"
        return False, why, "move the files that are not the job's samples out of [job] out"
    failed = f", {saved['failed']} failed with a reason" if saved.get("failed") else ""
    return True, f"{saved.get('ok')} / {saved.get('total')} sound{failed} at {at}, unchanged since", ""
