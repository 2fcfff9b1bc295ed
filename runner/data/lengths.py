"""Every row's token count, computed once in the background and cached in the output, so the
ETA can count the tokens left (rows differ by orders of magnitude) rather than the rows."""

from __future__ import annotations

import json
import logging
import os
import threading
from array import array

from ..contract.atomic import write_atomic
from .dataset import RowError, open_dataset

FILE = "lengths.json"  # not *.ckpt: SpecForge never reads it
log = logging.getLogger("hsx.lengths")


def fingerprint(job) -> str:
    """What the lengths depend on: the dataset file, the tokenizer and max_length."""
    st = os.stat(job.dataset)
    return f"{os.path.abspath(job.dataset)}:{st.st_size}:{st.st_mtime_ns}:{os.path.abspath(job.tokenizer)}:{job.max_length}"


def load(out: str, fp: str) -> array | None:
    try:
        with open(os.path.join(out, FILE)) as f:
            d = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(d, dict) or d.get("fingerprint") != fp or not isinstance(d.get("lengths"), list):
        return None
    return array("I", d["lengths"])


def compute(job, vocab_size: int | None, out: str, stop: threading.Event) -> array | None:
    """Tokenize every row on a dataset of its own (a Dataset is not shared across threads);
    unusable rows count 0. None if stopped first."""
    fp = fingerprint(job)
    ds = open_dataset(job, vocab_size)
    try:
        lengths = array("I")
        for idx in range(len(ds)):
            if stop.is_set():
                return None
            try:
                lengths.append(len(ds.get(idx).input_ids))
            except RowError:
                lengths.append(0)
    finally:
        ds.close()
    write_atomic(os.path.join(out, FILE), json.dumps({"fingerprint": fp, "lengths": lengths.tolist()}))
    return lengths


def in_background(job, vocab_size: int | None, out: str, ready) -> threading.Event:
    """The cached lengths now, or computed on a thread; ``ready(lengths)`` gets them. Returns
    the event that stops the computation."""
    stop = threading.Event()
    have = load(out, fingerprint(job))
    if have is not None:
        ready(have)
        return stop

    def work():
        try:
            got = compute(job, vocab_size, out, stop)
        except Exception as e:  # noqa: BLE001 - the ETA falls back to samples; the job goes on
            log.warning("token lengths not computed (%s); the ETA counts samples", e)
            return
        if got is not None:
            log.info("token lengths of %d rows computed", len(got))
            ready(got)

    threading.Thread(target=work, name="lengths", daemon=True).start()
    return stop
