"""The runner's side of the status record: counters, the rate window, disk, events.

The writer owns ``status.json`` and ``events.jsonl``; it is the only place their numbers
are computed. Rate counts only samples extracted this run (skips never inflate it)."""

from __future__ import annotations

import collections
import logging
import os
import shutil
import socket
import time

import orjson

from ..contract import timing
from ..contract.status import Disk, Phase, StatusRecord, now_iso, write_record
from ..output.ranks import RunPaths

LATENCY_SAMPLES = 200  # the p50/p95 over this many recent samples
RATE_SAMPLES = 20_000  # one a minute (Timing.rate_sample_s): two weeks of run for the median
LOW_RATE = 0.5  # below this fraction of the run's median rate, the rate has dropped
log = logging.getLogger("hsx.record")


class Recorder:
    def __init__(self, paths: RunPaths, job: str, total: int, window_s: float):
        self.out = out = paths.out
        self.path, self.events_path = paths.status, paths.events
        self.window_s = window_s
        self._win: collections.deque[tuple[float, int]] = collections.deque()
        self._bytes = 0
        self._bytes_n = 0
        self._last_progress_event = 0.0
        self._last_milestone = -1
        self.in_flight: dict[int, float] = {}  # idx -> monotonic start (the extractor fills it)
        self.remaining_tokens = lambda: None  # tokens left, once the rows' lengths are known
        self._latency: collections.deque[float] = collections.deque(maxlen=LATENCY_SAMPLES)
        self._rates_seen: collections.deque[float] = collections.deque(maxlen=RATE_SAMPLES)
        self._rate_sampled = 0.0
        # a short window samples faster
        self._rate_every = min(timing.current().rate_sample_s, window_s / 4)
        self.record = StatusRecord(
            job=job, host=socket.gethostname(), pid=os.getpid(), alive=True, total=total, started_at=now_iso()
        )
        self.record.disk.path = out

    def carry_counts(self) -> None:
        """Keep the claimed record's counts (the last run's) until this run's plan is made, so
        a failure in set-up does not read as an empty job."""
        from ..contract.status import read_record

        try:
            old = read_record(self.path)
        except Exception:  # noqa: BLE001 - no usable record: start from zero
            return
        for k in ("total", "done", "failed", "adopted", "truncated", "requeued_from"):
            setattr(self.record, k, getattr(old, k))

    # --- counters --------------------------------------------------------------------------
    def set_done(self, committed: int, failed: int, avg_bytes: float | None = None) -> None:
        """What the plan found. Adopted samples are part of done, never of the rate: only
        ``extracted`` feeds the window, so the rate and ETA are this run's own work."""
        from ..output.store import Store

        self.record.done, self.record.failed = committed, failed
        self.record.adopted = len(Store(self.out).adopted())
        if avg_bytes:
            self._bytes, self._bytes_n = avg_bytes * committed, committed
        self._last_milestone = self._milestone(committed)

    def extracted(self, tokens: int, nbytes: int, seconds: float | None = None) -> None:
        self.record.last_commit_at = now_iso()
        if seconds is not None:
            self._latency.append(seconds)
        self.record.done += 1
        self.record.done_this_run += 1
        self._bytes += nbytes
        self._bytes_n += 1
        self._win.append((time.monotonic(), tokens))
        m = self._milestone(self.record.done)
        if m > self._last_milestone:
            self._last_milestone = m
            self.event("milestone", pct=m * 10, done=self.record.done, total=self.record.total)

    def failed(self, idx: int, reason: str, permanent: bool) -> None:
        self.record.errors_this_run += 1
        if permanent:
            self.record.failed += 1
        self.record.last_error = f"sample {idx}: {reason}"[:500]
        self.event("sample_failed", idx=idx, reason=reason[:500], permanent=permanent)

    def error(self, msg: str) -> None:
        self.record.errors_this_run += 1
        self.record.last_error = msg[:500]
        self.event("error", message=msg[:500])

    def _milestone(self, done: int) -> int:
        return (done * 10 // self.record.total) if self.record.total else 0

    # --- phases and events ---------------------------------------------------------------
    def phase(self, phase: Phase, reason: str | None = None) -> None:
        if phase != self.record.phase or reason != self.record.reason:
            self.record.phase = phase
            self.record.reason = reason
            self.record.phase_since = now_iso()
            r = self.record  # the counts make each phase change a point on the chart
            self.event("phase", phase=phase.value, reason=reason, done=r.done, total=r.total)
        self.write()

    def event(self, kind: str, **fields) -> None:
        if kind != "progress":  # the log tells the same story as the events, minus chart points
            log.info("%s %s", kind, " ".join(f"{k}={v}" for k, v in fields.items() if v is not None))
        line = orjson.dumps({"t": now_iso(), "event": kind, **fields})
        with open(self.events_path, "ab") as f:
            f.write(line + b"\n")

    # --- the record ----------------------------------------------------------------------
    def _rates(self, now: float) -> None:
        while self._win and now - self._win[0][0] > self.window_s:
            self._win.popleft()
        r = self.record
        if len(self._win) < 2:
            r.rate = r.tokens_per_s = r.eta_s = r.rate_trend = None
            return
        span = now - self._win[0][0]
        if span <= 0:
            return
        n = len(self._win) - 1  # intervals between extracted samples in the window
        r.rate = n / span
        r.tokens_per_s = sum(t for _, t in list(self._win)[1:]) / span
        remaining = max(0, r.total - r.done - r.failed)
        tokens_left = self.remaining_tokens() if r.tokens_per_s else None
        if tokens_left is not None:  # rows differ in length by orders of magnitude: count tokens
            r.eta_s, r.eta_basis = tokens_left / r.tokens_per_s, "tokens"
        else:
            r.eta_s, r.eta_basis = (remaining / r.rate if r.rate > 0 else None), "samples"
        # trend: the newest third of the window against the whole
        cut = now - span / 3
        recent = [t for t, _ in self._win if t >= cut]
        if len(recent) >= 3 and now - recent[0] > 0:
            rr = (len(recent) - 1) / (now - recent[0])
            r.rate_trend = (
                "steady" if abs(rr - r.rate) <= 0.15 * r.rate else ("rising" if rr > r.rate else "falling")
            )
        else:
            r.rate_trend = None

    def _flow(self, now: float) -> None:
        """What a stall or a slowdown shows: requests out and for how long, latency, the
        rate against this run's median."""
        r = self.record
        r.in_flight = len(self.in_flight)
        if self.in_flight:
            idx, t0 = min(self.in_flight.items(), key=lambda kv: kv[1])
            r.oldest_in_flight_s, r.oldest_in_flight_idx = round(now - t0, 1), idx
        else:
            r.oldest_in_flight_s = r.oldest_in_flight_idx = None
        if self._latency:
            lat = sorted(self._latency)
            r.latency_p50_s = round(lat[len(lat) // 2], 3)
            r.latency_p95_s = round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 3)
        if r.rate is not None and now - self._rate_sampled >= self._rate_every:
            self._rate_sampled = now
            self._rates_seen.append(r.rate)
            seen = sorted(self._rates_seen)
            r.rate_median = seen[len(seen) // 2]
        low = r.phase == Phase.EXTRACTING and r.rate_median and (r.rate or 0.0) < LOW_RATE * r.rate_median
        if not low:
            r.rate_low_since = None
        elif r.rate_low_since is None:
            r.rate_low_since = now_iso()

    def _disk(self) -> None:
        d = self.record.disk
        try:
            u = shutil.disk_usage(self.out)
        except OSError:
            return
        d.used, d.free = u.used, u.free
        remaining = max(0, self.record.total - self.record.done - self.record.failed)
        d.need = int(self._bytes / self._bytes_n * remaining) if self._bytes_n else None

    @property
    def bytes_per_sample(self) -> float | None:
        return self._bytes / self._bytes_n if self._bytes_n else None

    def write(self) -> None:
        now = time.monotonic()
        self._rates(now)
        self._flow(now)
        self._disk()
        self.record.heartbeat_at = now_iso()
        write_record(self.path, self.record)
        every = min(timing.current().progress_event_s, self.window_s / 2)  # a short job: more points
        if self.record.phase == Phase.EXTRACTING and now - self._last_progress_event >= every:
            self._last_progress_event = now
            r = self.record  # total and eta_s came later: readers take events without them
            self.event("progress", done=r.done, total=r.total, rate=r.rate, eta_s=r.eta_s)

    def final_disk(self) -> Disk:
        self._disk()
        return self.record.disk


def claim_record(path: str, job: str) -> None:
    """Right after taking the lock: a record naming this runner, so a kill from here on reads
    as a crash; the previous run's counts stay until the plan replaces them."""
    from ..contract.status import StatusError, read_record

    try:
        rec = read_record(path)
    except StatusError:
        rec = StatusRecord(job=job)
    rec.phase, rec.reason, rec.pid, rec.alive = Phase.PREFLIGHT, None, os.getpid(), True
    rec.failed_in = rec.hint = rec.log_tail = rec.handoff = None
    rec.started_at = rec.heartbeat_at = rec.phase_since = now_iso()
    rec.done_this_run = rec.errors_this_run = 0
    rec.rate = rec.tokens_per_s = rec.eta_s = None
    write_record(path, rec)
