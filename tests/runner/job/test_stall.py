"""Stalls and slowdowns are alerts: a real runner whose real server is stopped (SIGSTOP) or
throttled, watched by the watcher's own decision on each real status record."""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time

import pytest

from bot.watch.watcher import Limits, Observation, WatchState, decide
from runner.contract.status import StatusRecord, parse_iso
from tests.runner.helpers import kill_group, out_dir, start_run, status, wait_for


class Watch:
    """The watcher's decisions over the live record, polled like the bot polls it."""

    def __init__(self, conf: str, lim: Limits):
        self.conf, self.lim, self.st, self.posted = conf, lim, WatchState(), []

    def poll(self, now: dt.datetime | None = None) -> StatusRecord:
        rec = StatusRecord.from_dict(status(self.conf))
        acts, self.st = decide(
            self.st, Observation(now or dt.datetime.now(dt.timezone.utc), record=rec), self.lim
        )
        self.posted += [(a.kind, a.text.split("\n")[0]) for a in acts if a.kind in ("alert", "recovered")]
        return rec

    def seen(self, kind: str, needle: str) -> list[str]:
        return [t for k, t in self.posted if k == kind and needle in t]


def _end(p) -> None:
    """Stop the runner as an operator would (it stops its server), then make sure."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(60)
    except Exception:  # noqa: BLE001 - a runner that does not stop is killed
        kill_group(p.pid)
        p.wait(10)


def _job(job, **kw):
    return job(
        samples=400, job__concurrency=2, job__request_timeout_s=300.0, job__status_interval_s=0.2, **kw
    )


@pytest.mark.slow
def test_a_stopped_server_is_stalled_within_the_threshold_and_resolved_after_sigcont(job):
    conf = _job(job)
    p = start_run(conf)
    pid = None
    try:
        wait_for(lambda: status(conf)["done"] >= 5, timeout=120, what="samples flowing")
        pid = status(conf)["server"]["pid"]
        w = Watch(conf, Limits(stall_after_s=3.0))
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        wait_for(lambda: (w.poll(), w.seen("alert", "STALLED"))[1], timeout=30, every=0.5, what="STALLED")
        assert time.monotonic() - stopped < 3.0 + 5.0  # the threshold, plus a poll and a record write
        (alert,) = w.seen("alert", "STALLED")
        assert "2 requests in flight, the oldest (sample " in alert, alert
        os.kill(pid, signal.SIGCONT)
        wait_for(lambda: (w.poll(), w.seen("recovered", "STALLED resolved"))[1], timeout=30, every=0.5,
                 what="resolved")  # fmt: skip
        assert len(w.seen("alert", "STALLED")) == 1
    finally:
        if pid:
            os.kill(pid, signal.SIGCONT)
        _end(p)


@pytest.mark.slow
def test_a_throttled_server_raises_a_rate_drop(job):
    conf = _job(job, job__rate_window_s=3.0)
    p = start_run(conf)
    pid, stop = None, threading.Event()
    try:
        rec = wait_for(lambda: (r := status(conf))["rate_median"] and r["done"] >= 40 and r, timeout=120,
                       what="a median rate")  # fmt: skip
        pid, median = rec["server"]["pid"], rec["rate_median"]

        def throttle():  # the server runs a tenth of the time
            while not stop.is_set():
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.45)
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.05)

        t = threading.Thread(target=throttle, daemon=True)
        t.start()
        low = wait_for(
            lambda: (r := status(conf))["rate_low_since"] and r, timeout=60, what="the rate falling"
        )
        assert low["rate"] < 0.5 * median, (low["rate"], median)
        w = Watch(conf, Limits(stall_after_s=300.0, rate_drop_after_s=600.0))
        w.poll()
        assert not w.seen("alert", "Rate drop")  # not for long yet
        w.poll(parse_iso(low["rate_low_since"]) + dt.timedelta(seconds=601))  # ten minutes on
        (alert,) = w.seen("alert", "Rate drop")
        assert "under half this run's median" in alert, alert
        stop.set()
        t.join()
        os.kill(pid, signal.SIGCONT)
        wait_for(lambda: (w.poll(), w.seen("recovered", "Rate drop resolved"))[1] or status(conf)["phase"] == "done",
                 timeout=90, every=0.5, what="the rate back")  # fmt: skip
    finally:
        stop.set()
        if pid:
            os.kill(pid, signal.SIGCONT)
        _end(p)


@pytest.mark.slow
def test_the_eta_counts_the_tokens_left_once_the_rows_lengths_are_known(job):
    """Token lengths are computed in the background on the first start and cached in the output."""
    import json

    from runner.contract.config import load
    from runner.data.dataset import open_dataset
    from runner.data.lengths import FILE, fingerprint

    conf = job(samples=200, job__concurrency=1, job__status_interval_s=0.2, job__rate_window_s=5.0)
    p = start_run(conf)
    try:
        rec = wait_for(lambda: (r := status(conf))["eta_basis"] == "tokens" and r["eta_s"] and r, timeout=120,
                       every=0.1, what="an ETA from tokens")  # fmt: skip
        assert rec["tokens_per_s"] > 0 and rec["phase"] == "extracting"
        assert p.wait(180) == 0
    finally:
        _end(p)
    cfg = load(conf)
    with open(os.path.join(out_dir(conf), FILE)) as f:
        cached = json.load(f)
    ds = open_dataset(cfg.job, None)
    assert cached["fingerprint"] == fingerprint(cfg.job)
    assert cached["lengths"] == [len(ds.get(i).input_ids) for i in range(len(ds))]


def test_eta_from_tokens_left_over_tokens_per_second(tmp_path):
    from runner.job.record import Recorder
    from runner.output.ranks import RunPaths

    rec = Recorder(RunPaths(str(tmp_path)), "j", 10, 30.0)
    rec._win.extend([(100.0, 50), (101.0, 100), (102.0, 100)])  # 200 tokens in 2 s after the first
    rec._rates(102.0)
    assert rec.record.eta_basis == "samples" and rec.record.eta_s == 10 / 1.0  # 10 rows left at 1 row/s
    rec.remaining_tokens = lambda: 1000
    rec._rates(102.0)
    assert rec.record.tokens_per_s == 100.0 and rec.record.eta_basis == "tokens" and rec.record.eta_s == 10.0
    rec.remaining_tokens = lambda: 50_000  # long rows left: the token ETA says so
    rec._rates(102.0)
    assert rec.record.eta_s == 500.0


def test_lengths_are_counted_once_then_read_from_the_cache(tmp_path):
    import json
    import threading

    from runner.contract.config import from_dict
    from runner.data import lengths

    data = tmp_path / "data.jsonl"
    rows = [{"input_ids": list(range(5, 5 + n)), "loss_mask": [1] * n} for n in (3, 7, 1)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    job = from_dict({"job": {"dataset": str(data), "out": str(tmp_path / "out"), "max_length": 5}}).job
    os.makedirs(job.out)
    got, done = [], threading.Event()
    lengths.in_background(job, 256, job.out, lambda v: (got.append(list(v)), done.set()))
    assert done.wait(30)
    assert got == [[3, 5, 1, 0]]  # truncated to max_length; an unusable row counts 0
    with open(os.path.join(job.out, lengths.FILE)) as f:
        assert json.load(f) == {"fingerprint": lengths.fingerprint(job), "lengths": [3, 5, 1, 0]}
    cached = []
    lengths.in_background(job, 256, job.out, lambda v: cached.append(list(v)))
    assert cached == [[3, 5, 1, 0]]  # from the cache, before in_background returned
    data.write_text(data.read_text() + json.dumps(rows[0]) + "\n")  # the dataset changed
    assert lengths.load(job.out, lengths.fingerprint(job)) is None
