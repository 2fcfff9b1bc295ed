"""Pause before the disk runs out (the seeds' root cause), continue when space returns.

The reserve is ``min_free_bytes`` plus room for the requests in flight (twice, per sample at
the running average, or at the worst case before the first sample is measured)."""

from __future__ import annotations

import shutil

from ..contract.status import Phase
from .record import Recorder

# Stored bytes over raw, per storage mode and mantissa bits: bench.storage on synthetic bf16
# states with massive-activation channels (2026-12-01). Estimates only, until the job has
# measured its own; rounding alone leaves a raw file's size as it is.
TYPICAL_RATIO = {("ckpt", b): 1.0 for b in range(8)} | {
    ("ckpt.gz", 7): 0.81,
    ("ckpt.gz", 4): 0.62,
    ("ckpt.gz", 3): 0.55,
}


def compact_hint(out: str, storage: str) -> str:
    """What ``hsx-runner compact`` would free: the raw samples there re-encoded to ckpt.gz at the
    typical ratio ('' when there are none)."""
    from ..output.store import Store

    try:
        raw = [
            e.get("bytes", 0) for e in Store(out).manifest().values() if e.get("storage", "ckpt") == "ckpt"
        ]
    except OSError:
        return ""
    if not raw:
        return ""
    gain = sum(raw) * (1 - TYPICAL_RATIO[("ckpt.gz", 7)])
    how = "/extract compact" if storage == "ckpt.gz" else '[job] storage = "ckpt.gz", then /extract compact'
    return f"; compacting the {len(raw):,} raw samples would free ~{fmt(gain)} ({how})"


def worst_case_bytes(max_length: int, hidden_size: int, dtype_bytes: int = 2) -> int:
    """hidden_state + aux (4H per token) + ids and mask, at max length."""
    return max_length * (4 * hidden_size * dtype_bytes + 16) + 4096


def fmt(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


class DiskGuard:
    def __init__(
        self,
        path: str,
        recorder: Recorder,
        min_free: int,
        in_flight: int,
        worst_case: int,
        storage: str = "ckpt",
    ):
        self.path, self.recorder = path, recorder
        self.min_free, self.in_flight, self.worst_case = min_free, in_flight, worst_case
        self.storage = storage
        self._hint = ""  # what compacting would free, worked out once per pause

    def reserve(self) -> int:
        per_sample = self.recorder.bytes_per_sample or self.worst_case
        return int(self.min_free + 2 * self.in_flight * per_sample)

    def free(self) -> int:
        return shutil.disk_usage(self.path).free

    def reason(self) -> str:
        """Stable while paused: the moving numbers (free, need) live in the record's disk."""
        return f"disk low: free space at {self.path} is below the {fmt(self.reserve())} reserve{self._hint}"

    def ok(self) -> bool:
        """True when there is room; moves the record to paused / extracting on a change."""
        free = self.free()
        paused = self.recorder.record.phase == Phase.PAUSED
        if free < self.reserve():
            if not paused:
                self._hint = compact_hint(self.path, self.storage)
                self.recorder.event(
                    "disk_low", free=free, reserve=self.reserve(), need=self.recorder.record.disk.need
                )
            self.recorder.phase(Phase.PAUSED, self.reason())
            return False
        if paused:
            self.recorder.event("disk_ok", free=free)
            self.recorder.phase(Phase.EXTRACTING)
        return True
