"""Watcher: the pure decision, and the real loop against the recording Slack API."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os

from slack_sdk import WebClient

from bot.watch import history, pinned
from bot.watch.watcher import Limits, Observation, Watcher, WatchState, decide, start_watcher
from remote.errors import BadReply, Unreachable
from runner.contract.status import StatusRecord
from runner.text import extraction
from tests.runner.helpers import wait_for

from .. import slack_api
from ..conftest import EXTRACTING
from ..http_bot import STRANGER, serve

T0 = dt.datetime(2030, 1, 1, 11, 43, tzinfo=dt.timezone.utc)
LIM = Limits(milestone_pct=10, heartbeat_stale_s=120, unreachable_alert_s=300)


def rec(**changes) -> StatusRecord:
    d = dict(EXTRACTING)
    d.update(changes)
    return StatusRecord.from_dict(d)


def kinds(actions) -> list[str]:
    return [a.kind for a in actions]


def test_milestones_once_each_and_done_once():
    st = WatchState()
    posted = []
    for i, done in enumerate([0, 3000, 3800, 3900, 7500, 7600, 37312]):
        now = T0 + dt.timedelta(minutes=i)
        phase = "done" if done == 37312 else "extracting"
        r = rec(done=done, phase=phase, heartbeat_at=now.isoformat())
        acts, st = decide(st, Observation(now, record=r), LIM)
        posted += [a.text.split("\n")[0] for a in acts if a.kind in ("milestone", "done")]
    assert posted[:2] == ["10% reached", "20% reached"]
    assert posted[2].startswith(":white_check_mark: Done: 37,312 / 37,312")
    assert len(posted) == 3


def test_done_waits_for_the_hand_off_to_training_and_says_what_came_of_it():
    st = WatchState()
    pending = rec(done=37312, phase="done", handoff="pending")
    for i in range(2):  # the runner verifies the features first: done is not the end of the story yet
        acts, st = decide(st, Observation(T0 + dt.timedelta(minutes=i), record=pending), LIM)
        assert "done" not in kinds(acts)
    said = "training started (after_extraction): training started (trainer pid 77)"
    acts, st = decide(
        st, Observation(T0 + dt.timedelta(minutes=2), record=rec(done=37312, phase="done", handoff=said)), LIM
    )
    (done,) = [a for a in acts if a.kind == "done"]
    assert done.text.startswith(":white_check_mark: Done: 37,312 / 37,312") and said in done.text
    acts, _ = decide(
        st, Observation(T0 + dt.timedelta(minutes=3), record=rec(done=37312, phase="done", handoff=said)), LIM
    )
    assert "done" not in kinds(acts)


def test_crash_alerts_once_with_resume_and_again_for_a_new_crash():
    st = WatchState()
    crashed = rec(
        phase="crashed", phase_since="2030-01-01T11:40:00Z", last_error="CUDA error: an illegal memory access"
    )
    acts, st = decide(st, Observation(T0, record=crashed), LIM)
    (alert,) = [a for a in acts if a.kind == "alert"]
    assert alert.resume and "CRASHED" in alert.text and "illegal memory access" in alert.text
    acts, st = decide(st, Observation(T0 + dt.timedelta(minutes=1), record=crashed), LIM)
    assert "alert" not in kinds(acts)
    again = rec(phase="crashed", phase_since="2030-01-01T12:40:00Z")
    acts, st = decide(st, Observation(T0 + dt.timedelta(hours=1), record=again), LIM)
    assert kinds(acts).count("alert") == 1


def test_stale_heartbeat_alerts_once():
    stale = rec(heartbeat_at="2030-01-01T11:30:00Z")  # 13 minutes before T0
    acts, st = decide(WatchState(), Observation(T0, record=stale), LIM)
    (alert,) = [a for a in acts if a.kind == "alert"]
    assert "No heartbeat for 13m" in alert.text and alert.resume
    acts, _ = decide(st, Observation(T0 + dt.timedelta(minutes=1), record=stale), LIM)
    assert "alert" not in kinds(acts)


def test_restarts_error_spike_and_disk_alerts():
    st = WatchState()
    _, st = decide(st, Observation(T0, record=rec(heartbeat_at=T0.isoformat())), LIM)
    worse = rec(
        heartbeat_at=T0.isoformat(),
        errors_this_run=12,
        server={"restarts": 1},
        disk={"path": "/data", "used": 10, "free": 100, "need": 500},
    )
    acts, st = decide(st, Observation(T0 + dt.timedelta(seconds=30), record=worse), LIM)
    heads = sorted(a.text.split("\n")[0] for a in acts if a.kind == "alert")
    assert len(heads) == 3
    assert any("Server restarted (1" in h for h in heads)
    assert any("Error spike: 12 new errors" in h for h in heads)
    assert any("Disk will run out" in h for h in heads)
    acts, _ = decide(st, Observation(T0 + dt.timedelta(seconds=60), record=worse), LIM)
    assert "alert" not in kinds(acts)


def test_a_restart_alert_names_the_rank_that_died():
    _, st = decide(WatchState(), Observation(T0, record=rec(heartbeat_at=T0.isoformat())), LIM)
    died = "TP1 scheduler (pid 4242) died, killed by SIGKILL"
    again = rec(heartbeat_at=T0.isoformat(), server={"restarts": 1, "last_death": died})
    acts, _ = decide(st, Observation(T0 + dt.timedelta(seconds=30), record=again), LIM)
    (alert,) = [a for a in acts if a.kind == "alert"]
    assert f"Server restarted (1 so far): {died} on " in alert.text.split("\n")[0]


def test_a_pause_for_disk_alerts_once_with_resume_even_without_a_forecast():
    st = WatchState()
    _, st = decide(st, Observation(T0, record=rec(heartbeat_at=T0.isoformat())), LIM)
    paused = rec(
        heartbeat_at=T0.isoformat(), phase="paused", reason="disk low: free space at /data is below the 2.1 GB reserve",
        disk={"path": "/data", "used": 10, "free": 100, "need": 50},
    )  # fmt: skip
    acts, st = decide(st, Observation(T0 + dt.timedelta(seconds=30), record=paused), LIM)
    (alert,) = [a for a in acts if a.kind == "alert"]
    assert alert.text.startswith(":rotating_light: Extraction PAUSED: disk low") and alert.resume
    for i in range(2, 4):  # still paused, then the forecast too: the same episode
        later = rec(heartbeat_at=T0.isoformat(), disk={"path": "/data", "used": 10, "free": 100, "need": 500})
        acts, st = decide(
            st, Observation(T0 + dt.timedelta(seconds=30 * i), record=paused if i == 2 else later), LIM
        )
        assert "alert" not in kinds(acts)


def test_unreachable_alerts_after_the_limit_once_then_recovers():
    err = Unreachable("jump root@10.1.2.6:22", "connection refused")
    st = WatchState()
    acts, st = decide(st, Observation(T0, error=err), LIM)
    assert acts == []
    acts, st = decide(st, Observation(T0 + dt.timedelta(seconds=200), error=err), LIM)
    assert acts == []
    acts, st = decide(st, Observation(T0 + dt.timedelta(seconds=301), error=err), LIM)
    (alert,) = acts
    assert "hop: jump root@10.1.2.6:22" in alert.text and "failing since 11:43 UTC" in alert.text
    acts, st = decide(st, Observation(T0 + dt.timedelta(seconds=400), error=err), LIM)
    assert acts == []
    acts, st = decide(
        st, Observation(T0 + dt.timedelta(seconds=500), record=rec(heartbeat_at=T0.isoformat())), LIM
    )
    assert "recovered" in kinds(acts) and st.unreachable_since is None


def test_progress_message_is_throttled_but_for_a_phase_that_changed():
    st = WatchState()
    r = rec(heartbeat_at=T0.isoformat())

    def progress(st, when, r=r):
        return pinned.judge(st, {"extraction": r}, T0 + dt.timedelta(seconds=when), LIM, read=["extraction"])

    acts, st = progress(st, 0)
    assert kinds(acts) == ["progress"] and acts[0].text == extraction.render_text(
        r, T0, LIM.heartbeat_stale_s
    )
    acts, st = progress(st, 20)
    assert "progress" not in kinds(acts)
    acts, st = progress(st, 61)
    assert "progress" in kinds(acts)
    acts, st = progress(st, 70, rec(heartbeat_at=T0.isoformat(), phase="paused"))
    assert "progress" in kinds(acts)  # at once
    assert "progress" not in kinds(decide(WatchState(), Observation(T0, record=r), LIM)[0])  # pinned's alone


def _watcher(fake, cfg, api, when):
    return Watcher(fake.box(), cfg, WebClient(token="xoxb-test", base_url=api), clock=lambda: when[0])


def test_restart_neither_repeats_nor_misses(fake, cfg):
    rec_ = slack_api.Recorder()
    server, api = slack_api.start(rec_)
    try:
        when = [T0]
        fake.set_status(done=3800, heartbeat_at=T0.isoformat())  # 10%
        _watcher(fake, cfg, api, when).tick()
        assert len(rec_.named("pins.add")) == 1
        (first_post, milestone) = rec_.named("chat.postMessage")
        assert milestone["thread_ts"] == "1700000000.000001" and milestone["text"].startswith("10% reached")
        assert rec_.named("pins.add")[0]["timestamp"] == "1700000000.000001"

        # A new bot process: same state file. Same status → nothing new; then a crash → one alert.
        when[0] = T0 + dt.timedelta(minutes=5)
        fake.set_status(heartbeat_at=when[0].isoformat())
        _watcher(fake, cfg, api, when).tick()
        assert len(rec_.named("chat.postMessage")) == 2
        assert len(rec_.named("chat.update")) == 1  # the pinned message, edited in place
        fake.set_status(phase="crashed", phase_since=when[0].isoformat(), last_error="OSError: disk gone")
        _watcher(fake, cfg, api, when).tick()
        _watcher(fake, cfg, api, when).tick()
        alerts = [
            p for p in rec_.named("chat.postMessage") if p["channel"] == "C0ALERTS" and "CRASHED" in p["text"]
        ]
        assert len(alerts) == 1 and "disk gone" in alerts[0]["text"]
    finally:
        server.shutdown()
        server.server_close()


def test_resume_button_resumes_once(fake, cfg):
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        fake.set_status(phase="crashed", phase_since=T0.isoformat(), heartbeat_at=T0.isoformat())
        Watcher(fake.box(), cfg, WebClient(token="x", base_url=bot.api), clock=lambda: T0).tick()
        (alert,) = [p for p in bot.rec.named("chat.postMessage") if ":rotating_light:" in p["text"]]
        blocks = json.loads(alert["blocks"]) if isinstance(alert["blocks"], str) else alert["blocks"]
        button = blocks[1]["elements"][0]
        assert button["action_id"] == "hsx_resume"

        assert bot.click("hsx_resume", button["value"], user=STRANGER) == 200
        (refusal,) = bot.rec.wait_for("response")
        assert "refused" in refusal["text"] and fake.verbs().count("resume") == 0

        assert bot.click("hsx_resume", button["value"]) == 200
        bot.rec.wait_for("response", 2)
        assert bot.click("hsx_resume", button["value"]) == 200
        third = bot.rec.wait_for("response", 3)[2]
        assert "already resumed" in third["text"]
        assert fake.verbs().count("resume") == 1
        assert [(e["user"], e["result"][:7]) for e in bot.audit()] == [
            (STRANGER, "refused"),
            ("U0OPERATOR", "attempt"),
            ("U0OPERATOR", "ok"),
        ]


def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def test_stalled_once_per_episode_naming_what_is_in_flight_then_resolved():
    lim = Limits(stall_after_s=300)
    last = T0 - dt.timedelta(minutes=4)
    stuck = dict(heartbeat_at=_iso(T0), last_commit_at=_iso(last), in_flight=8, oldest_in_flight_s=250.0,
                 oldest_in_flight_idx=25581, latency_p50_s=2.0)  # fmt: skip
    acts, st = decide(WatchState(), Observation(T0, record=rec(**stuck)), lim)
    assert "alert" not in kinds(acts)  # 4 minutes: under max(300 s, 10 x 2 s)
    later = T0 + dt.timedelta(minutes=2)
    acts, st = decide(st, Observation(later, record=rec(**{**stuck, "heartbeat_at": _iso(later)})), lim)
    (alert,) = [a for a in acts if a.kind == "alert"]
    assert "STALLED: no sample committed for 6m" in alert.text and "8 requests in flight" in alert.text
    assert "the oldest (sample 25581) out for 4m10s" in alert.text and not alert.resume
    again = later + dt.timedelta(minutes=1)
    acts, st = decide(st, Observation(again, record=rec(**{**stuck, "heartbeat_at": _iso(again)})), lim)
    assert "alert" not in kinds(acts)  # one alert per episode
    moving = {**stuck, "last_commit_at": _iso(again), "heartbeat_at": _iso(again)}
    acts, st = decide(st, Observation(again, record=rec(**moving)), lim)
    (ok,) = [a for a in acts if a.kind == "recovered"]
    assert ok.text.startswith(":white_check_mark: STALLED resolved on gpu-1")
    acts, _ = decide(st, Observation(again, record=rec(**moving)), lim)
    assert "recovered" not in kinds(acts)


def test_the_stall_threshold_grows_with_slow_samples():
    slow = rec(heartbeat_at=_iso(T0), last_commit_at=_iso(T0 - dt.timedelta(minutes=8)), latency_p50_s=60.0)
    acts, _ = decide(WatchState(), Observation(T0, record=slow), Limits(stall_after_s=300))
    assert "alert" not in kinds(acts)  # 8 minutes < 10 x 60 s


def test_rate_drop_after_its_time_below_half_the_median():
    lim = Limits(rate_drop_after_s=600)
    r = dict(heartbeat_at=_iso(T0), last_commit_at=_iso(T0), rate=0.4, rate_median=1.16)
    acts, st = decide(
        WatchState(), Observation(T0, record=rec(**r, rate_low_since=_iso(T0 - dt.timedelta(minutes=5)))), lim
    )
    assert "alert" not in kinds(acts)
    low = _iso(T0 - dt.timedelta(minutes=11))
    acts, st = decide(st, Observation(T0, record=rec(**r, rate_low_since=low)), lim)
    (alert,) = [a for a in acts if a.kind == "alert"]
    assert "Rate drop: 0.40 samples/s for 11m, under half this run's median 1.16/s" in alert.text
    acts, _ = decide(st, Observation(T0, record=rec(**{**r, "rate": 1.1}, rate_low_since=None)), lim)
    assert [a.text.split("\n")[0] for a in acts if a.kind == "recovered"] == [
        ":white_check_mark: Rate drop resolved on gpu-1"
    ]


def test_an_error_spike_is_judged_against_the_requests_in_flight():
    st = WatchState()
    _, st = decide(st, Observation(T0, record=rec(heartbeat_at=_iso(T0), in_flight=4)), LIM)
    acts, st = decide(
        st, Observation(T0, record=rec(heartbeat_at=_iso(T0), in_flight=4, errors_this_run=4)), LIM
    )
    assert any(
        "Error spike: 4 new errors since the last check (4 requests in flight)" in a.text for a in acts
    )
    acts, _ = decide(
        st, Observation(T0, record=rec(heartbeat_at=_iso(T0), in_flight=4, errors_this_run=7)), LIM
    )
    assert "alert" not in kinds(acts)  # 3 new, under a round of 4


def test_unreachable_counts_from_when_the_box_stopped_answering_not_when_the_poll_gave_up():
    err = Unreachable("target", "127.0.0.3:22: SSH handshake failed")
    stopped = T0 - dt.timedelta(seconds=290)  # the read that never answered began then
    acts, st = decide(WatchState(), Observation(T0, error=err, since=stopped), LIM)
    assert acts == []
    acts, st = decide(st, Observation(T0 + dt.timedelta(seconds=11), error=err, since=stopped), LIM)
    (alert,) = acts
    assert alert.kind == "alert" and "failing since 11:38 UTC" in alert.text
    acts, st = decide(
        st, Observation(T0 + dt.timedelta(seconds=60), record=rec(heartbeat_at=T0.isoformat())), LIM
    )
    (back,) = [a for a in acts if a.kind == "recovered"]
    assert back.text == "GPU box reachable again after 5m50s"


def _alerts(rec_, word: str) -> list[dict]:
    posts = rec_.named("chat.postMessage")  # the progress message goes there too: alerts only
    heads = [(p, p["text"].split("\n")[0]) for p in posts]
    return [p for p, h in heads if h.startswith((":rotating_light:", ":warning:")) and word in h]


def _ticks(fake, n: int, timeout: float = 20.0) -> None:
    """Wait until the scheduler's watcher has asked the box for its status ``n`` more times."""
    start = fake.verbs().count("status")
    wait_for(lambda: fake.verbs().count("status") >= start + n, timeout, what="the watcher's next polls")


def test_a_malformed_record_is_named_once_and_the_crash_after_it_is_alerted(fake, cfg):
    rec_ = slack_api.Recorder()
    server, api = slack_api.start(rec_)
    fake.set_status(heartbeat_at=5)  # passes for a record, breaks every renderer
    scheduler = start_watcher(fake.box(), cfg, WebClient(token="xoxb-test", base_url=api))
    try:
        (unreadable,) = rec_.wait_for("chat.postMessage")
        assert unreadable["channel"] == "C0ALERTS" and "status unreadable" in unreadable["text"]
        assert "'heartbeat_at'" in unreadable["text"]
        _ticks(fake, 3)  # the same bad record, polled again: not a second alert
        assert len(rec_.named("chat.postMessage")) == 1
        fake.set_status(
            phase="crashed", heartbeat_at=_iso(T0), phase_since=_iso(T0), last_error="OSError: gone"
        )
        (crash,) = wait_for(lambda: _alerts(rec_, "CRASHED"), 20, what="the crash alert")
        assert "OSError: gone" in crash["text"] and len(_alerts(rec_, "status unreadable")) == 1
    finally:
        scheduler.shutdown(wait=True)
        server.shutdown()
        server.server_close()
    saved = WatchState.load(cfg.watcher.state_file)
    posted = saved.kinds["extraction"]  # the extraction's alerts (the box's own are saved.active)
    assert saved.phase == "crashed" and any(k.startswith("crashed:") for k in posted.active)


def test_a_failing_step_neither_stops_the_save_nor_the_alerts(fake, cfg, caplog):
    os.makedirs(history.history_path(cfg))  # the chart's history cannot be appended to
    rec_ = slack_api.Recorder()
    server, api = slack_api.start(rec_)
    fake.set_status(phase="crashed", heartbeat_at=_iso(T0), phase_since=_iso(T0))
    try:
        with caplog.at_level(logging.ERROR, logger="hsx.watcher"):
            _watcher(fake, cfg, api, [T0]).tick()
        (crash,) = _alerts(rec_, "CRASHED")
        assert "history" in caplog.text and "Traceback" in caplog.text  # logged with its stack
        assert WatchState.load(cfg.watcher.state_file).phase == "crashed"
        _watcher(fake, cfg, api, [T0 + dt.timedelta(minutes=1)]).tick()  # saved: not posted twice
        assert len(_alerts(rec_, "CRASHED")) == 1
    finally:
        server.shutdown()
        server.server_close()


def test_a_record_no_renderer_can_read_is_reported_as_unreadable_once(fake, cfg, monkeypatch):
    def broken(*a, **k):
        raise ZeroDivisionError("a renderer bug")

    monkeypatch.setattr(extraction, "render_text", broken)
    rec_ = slack_api.Recorder()
    server, api = slack_api.start(rec_)
    try:
        for minute in (0, 1):
            _watcher(fake, cfg, api, [T0 + dt.timedelta(minutes=minute)]).tick()
        (alert,) = rec_.named("chat.postMessage")
        assert "status unreadable" in alert["text"] and "ZeroDivisionError" in alert["text"]
        assert os.path.exists(cfg.watcher.state_file)
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreadable_record_is_its_own_alert_at_once_and_ends_when_one_reads():
    err = BadReply("status record field 'pid' is not an integer or null (got str)")
    acts, st = decide(WatchState(), Observation(T0, error=err, since=T0), LIM)
    (alert,) = acts
    assert alert.kind == "alert" and "status unreadable" in alert.text and "'pid'" in alert.text
    assert st.unreachable_since is None  # the box answered: it is not unreachable
    acts, st = decide(st, Observation(T0 + dt.timedelta(minutes=10), error=err, since=T0), LIM)
    assert acts == []
    acts, st = decide(st, Observation(T0 + dt.timedelta(minutes=11), record=rec(heartbeat_at=_iso(T0))), LIM)
    assert [a.text.split("\n")[0] for a in acts if a.kind == "recovered"] == [
        ":white_check_mark: Status readable again on gpu-1"
    ]
    assert not any(k.startswith("unreadable:") for k in st.active)


def test_a_requeued_slurm_rank_is_a_milestone_once_per_requeue_never_a_crash_alert():
    """A rank whose task Slurm requeued (issue 48) and that runs again: a line in the thread, once
    per requeue of its task; past its budget (failed) the rank's alert says it instead."""
    base = {"rank": 0, "lo": 0, "hi": 300, "job": "7_0", "slurm": "RUNNING", "phase": "extracting",
            "total": 300, "done": 120, "requeues": 1, "requeued_for": "signalled before its time limit or a preemption"}  # fmt: skip
    st, said = WatchState(), []
    for i, r in enumerate([{**base, "state": "running"}, {**base, "state": "running", "done": 150},
                           {**base, "state": "pending", "slurm": "PENDING", "requeues": 2, "requeued_for": None},
                           {**base, "state": "failed", "slurm": "FAILED", "requeues": 3}]):  # fmt: skip
        now = T0 + dt.timedelta(minutes=i)
        acts, st = decide(st, Observation(now, record=rec(heartbeat_at=now.isoformat(), ranks=[r])), LIM)
        heads = [(a.kind, a.text.split("\n")[0]) for a in acts]
        said += [(k, h) for k, h in heads if h.startswith("Rank 0 requeued") or k == "alert"]
    assert said[:2] == [
        (
            "milestone",
            "Rank 0 requeued once (signalled before its time limit or a preemption); it resumes at 120 / 300",
        ),
        ("milestone", "Rank 0 requeued twice (by Slurm); it resumes at 120 / 300"),
    ], said
    assert [k for k, _ in said[2:]] == ["alert"] and not any(k == "alert" for k, _ in said[:2]), said
