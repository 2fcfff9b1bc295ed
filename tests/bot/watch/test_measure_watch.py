"""The watcher on the draft's measurement: a crash or failure alerts once per launch with a Resume
button, a restart and a stall once each, each setting measured once in the thread, and done with
the measured accept length beside the simulated one; the pure judging (the real loop and its
Resume button: test_every_kind_watch.py)."""

from __future__ import annotations

import datetime as dt

from bot.watch.measure_watch import judge
from bot.watch.watcher import WatchState
from runner.contract.measure import MeasureRecord

from ..verbs.test_measure_chat import ALONE, BEST, MEASURING_REC, NOW

CRASHED = {**MEASURING_REC, "phase": "crashed",
           "reason": "measuring supervisor (pid 4343) gone while measuring; last heartbeat /data/x"}  # fmt: skip
DONE = {**MEASURING_REC, "phase": "done", "done": 20, "heartbeat": "2026-12-01T12:09:00Z",
        "ended_at": "2026-12-01T12:09:00Z", "settings": [ALONE, {**BEST, "requests": 10}]}  # fmt: skip


def run(records: list[dict], now: dt.datetime = NOW, stall_s: float = 300.0, kinds=("alert", "done")):
    """What judge posts, record after record: (kind, headline, Resume button)."""
    st, out = WatchState(), []
    for d in records:
        acts, st = judge(st, MeasureRecord.from_dict(d), now, stall_s)
        out += [(a.kind, a.text.split("\n")[0], a.resume) for a in acts if a.kind in kinds]
    return out


def test_a_crash_alerts_once_per_launch_with_resume_and_the_reason_for_operators():
    posted = run([CRASHED, CRASHED, {**CRASHED, "pid": 4400}])
    assert posted == [("alert", ":rotating_light: Measurement CRASHED", True)] * 2
    (a,) = [a for a in judge(WatchState(), MeasureRecord.from_dict(CRASHED), NOW)[0] if a.kind == "alert"]
    assert a.key.startswith("measure:") and "gone while measuring" in a.private
    assert "/data" not in a.text and "the measurement crashed; ask an operator" in a.text
    failed = {
        **CRASHED,
        "phase": "failed",
        "ended_at": "2026-12-01T12:09:00Z",
        "reason": "restart cap 2 spent",
    }
    assert run([failed, failed]) == [("alert", ":rotating_light: Measurement FAILED", True)]


def test_a_server_restart_alerts_once_per_count():
    posted = run([MEASURING_REC, {**MEASURING_REC, "restarts": 1}, {**MEASURING_REC, "restarts": 1}])
    assert posted == [("alert", ":warning: Measurement's server restarted (1 so far)", False)]


def test_no_request_for_the_stall_bound_alerts_once_without_a_button():
    beat = {**MEASURING_REC, "heartbeat": "2026-12-01T12:04:00Z"}  # 6 minutes before NOW
    assert run([beat], stall_s=400.0) == []
    posted = run([beat, beat], stall_s=300.0)
    assert posted == [("alert", ":warning: Measurement STALLED: no request finished for 6m00s at 3/1/4 (16 / 20)",
                       False)]  # fmt: skip
    (a,) = [a for a in judge(WatchState(), MeasureRecord.from_dict(beat), NOW)[0] if a.kind == "alert"]
    assert "`/measure stop`, then `/measure resume`" in a.text
    loading = {**beat, "phase": "starting_server"}  # the server's lifecycle bounds its start-up
    assert run([loading]) == []


def test_each_setting_measured_once_in_the_thread_and_done_says_both_figures():
    half = {**MEASURING_REC, "total": 20, "settings": [ALONE, {**BEST, "requests": 6}]}
    posted = run([half, half, DONE, DONE], kinds=("milestone", "done"))
    assert posted[0] == (
        "milestone",
        ":bar_chart: Measured the target alone: 10 requests · 300 tokens/s",
        False,
    )
    assert [k for k, _, _ in posted] == ["milestone", "done"]
    _, st = judge(WatchState(), MeasureRecord.from_dict(half), NOW)
    (done,) = judge(st, MeasureRecord.from_dict(DONE), NOW)[0]
    assert done.text.splitlines()[2].startswith("measured accept length 1.68 (3/1/4) · simulated 1.59")
    assert "510 tokens/s with the draft · 300 without · 1.70×" in done.text
    assert "serve it: python -m sglang.launch_server" in done.private and "launch_server" not in done.text
    assert run([{**MEASURING_REC, "started_at": None, "phase": "stopped"}]) == []  # never started
