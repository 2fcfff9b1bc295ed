"""`/extract chart`: what the picture says, read from the figure's artists and text, not pixels.
The last test draws it from a real runner's events after a real kill -9 and a resume."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from bot.render import chart
from runner.contract.status import Phase, StatusRecord

T0 = dt.datetime(2030, 1, 1, 6, 33, tzinfo=dt.timezone.utc)


def at(s: float) -> str:
    return (T0 + dt.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_events(t: float, done: int, n: int, step: int, total: int, old: bool = False) -> list[dict]:
    """One runner's events: starting the server, extracting, a progress point a minute."""
    counts = {} if old else {"done": done, "total": total}
    ev = [
        {"t": at(t), "event": "phase", "phase": "starting_server", "reason": None, **counts},
        {"t": at(t + 30), "event": "phase", "phase": "extracting", "reason": None, **counts},
    ]
    for i in range(1, n + 1):
        done += step
        p = {"t": at(t + 30 + 60 * i), "event": "progress", "done": done, "rate": None if old else step / 60}
        ev.append(p if old else {**p, "total": total, "eta_s": (total - done) / (step / 60)})
    return ev


def the_seed() -> list[dict]:
    """Extracting; killed (no last word); 20 minutes down; resumed; a stall; a disk pause."""
    ev = run_events(0, 0, 30, 10, 1200)  # 300 done by 06:33:30 + 30 min, then the kill
    ev += run_events(3000, 300, 5, 12, 1200)  # resumed 50 min after the start, 30 s to extract
    last = ev[-1]
    for i in range(1, 8):  # seven minutes without a commit, still extracting
        ev.append({**last, "t": at(3030 + 300 + 60 * i)})
    ev += [
        {"t": at(3030 + 300 + 480), "event": "progress", "done": 372, "total": 1200, "rate": 0.2},
        {"t": at(4000), "event": "phase", "phase": "paused", "reason": "disk low: free space", "done": 372},
        {"t": at(4600), "event": "phase", "phase": "extracting", "reason": None, "done": 372},
        {"t": at(4660), "event": "progress", "done": 384, "total": 1200, "rate": 0.2, "eta_s": 4080},
    ]
    return ev


def kinds(s: chart.Story) -> list[str]:
    return [m.kind for m in s.marks]


def test_the_seeds_story_is_marked_where_it_happened():
    s = chart.story(the_seed(), stall_s=300)
    assert kinds(s) == ["crash", "resume", "stall", "pause", "resume"]
    crash, resume, stall, pause, _ = s.marks
    assert (crash.t, crash.done, crash.until) == (
        T0 + dt.timedelta(seconds=1830),
        300,
        T0 + dt.timedelta(seconds=3000),
    )
    assert crash.note == "down 19m" and resume.done == 300
    assert stall.done == 360 and (stall.until - stall.t).total_seconds() == 480
    assert pause.note.startswith("disk low") and (pause.until - pause.t).total_seconds() == 600
    assert len(s.runs) == 2 and s.total == 1200 and s.done == 384 and s.phase == "extracting"
    # the projection is the current rate's: 816 left at 0.2 samples/s from the last point
    assert s.rate == 0.2 and s.finish == T0 + dt.timedelta(seconds=4660 + 816 / 0.2)
    assert chart.title(s) == "job: 384 / 1,200 done (32.0%) — extracting"
    cap = chart.caption(s)
    assert "samples done 0 → 384, Jan 01 06:33:00 to 07:50:40 UTC (1h17m)" in cap
    assert "1 crash (down 19m), 1 stall, 1 pause, 2 resumes" in cap
    assert "0.20 samples/s now, projected finish Jan 01 08:58 UTC" in cap


def test_the_figure_draws_the_lines_marks_and_spans_of_the_story():
    s = chart.story(the_seed(), stall_s=300)
    fig = chart.figure(s)
    ax, ax2 = fig.axes
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert labels[:2] == ["samples done", "_run"]  # a gap between the two runs, not one line
    assert "total 1,200" in labels and "projected finish Jan 01 08:58 UTC" in labels
    marks = [ln.get_gid() for ln in ax.get_lines() if ln.get_gid()]
    assert marks == ["mark:crash", "mark:resume", "mark:stall", "mark:pause", "mark:resume"]
    crash = next(ln for ln in ax.get_lines() if ln.get_gid() == "mark:crash")
    assert list(crash.get_ydata()) == [300]
    spans = [p.get_label() for p in ax.patches]
    assert spans == ["down (crashed)", "stalled", "paused"]
    texts = [t.get_text() for t in ax.texts]
    assert "crash\ndown 19m" in texts and "pause\ndisk low: free space" in texts
    assert ax.get_title(loc="left") == "job: 384 / 1,200 done (32.0%) — extracting"
    assert ax2.get_ylabel() == "samples/s" and [ln.get_label() for ln in ax2.get_lines()][0] == "samples/s"
    assert chart.render_png(s).startswith(b"\x89PNG")


def test_old_events_without_counts_or_rate_still_chart():
    """Events written before progress carried total/eta_s and phases carried done: the total
    comes from a milestone, the rate from the points' own slope, the crash from the restart."""
    ev = run_events(0, 0, 10, 6, 120, old=True) + run_events(1200, 60, 10, 6, 120, old=True)
    ev.append({"t": at(630), "event": "milestone", "pct": 50, "done": 60, "total": 120})
    s = chart.story(ev)
    assert s.total == 120 and kinds(s) == ["crash", "resume"] and len(s.runs) == 2
    assert all(abs(r - 0.1) < 1e-9 for run in s.rates for _, r in run) and all(s.rates)
    assert chart.title(s) == "job: 120 / 120 done (100.0%) — extracting"
    assert chart.render_png(s).startswith(b"\x89PNG")


def test_points_older_than_the_events_kept_are_no_crash():
    """The watcher's points reach further back than the runner's events tail: a runner's
    start after them is a resume, not the end of a run that died."""
    ev = [{"t": at(60 * i), "done": 10 * i, "rate": 0.16} for i in range(5)] + run_events(600, 40, 3, 10, 100)
    s = chart.story(ev)
    assert kinds(s) == ["resume"] and len(s.runs) == 2


def test_a_short_job_has_a_span_to_the_second_and_the_record_names_it():
    ev = [
        {"t": "2030-01-01T06:33:05Z", "event": "phase", "phase": "extracting", "done": 0, "total": 40},
        {"t": "2030-01-01T06:33:50Z", "event": "phase", "phase": "done", "done": 40, "total": 40},
    ]
    rec = StatusRecord(job="demo", phase=Phase.DONE, total=40, done=40, heartbeat_at="2030-01-01T06:33:50Z")
    s = chart.story(ev, rec)
    assert "06:33:05 to 06:33:50 UTC (45s)" in chart.caption(s) and kinds(s) == ["done"]
    assert chart.title(s) == "demo: 40 / 40 done (100.0%) — done" and s.finish is None


def test_a_running_job_is_projected_from_the_record_now():
    ev = run_events(0, 0, 5, 10, 100)
    rec = StatusRecord(job="j", phase=Phase.EXTRACTING, total=100, done=55, rate=0.2, eta_s=900.0,
                       heartbeat_at=at(400))  # fmt: skip
    s = chart.story(ev, rec)
    assert s.points[-1] == (T0 + dt.timedelta(seconds=400), 55) and s.rate == 0.2
    assert s.finish == T0 + dt.timedelta(
        seconds=1300
    ) and "projected finish Jan 01 06:54 UTC" in chart.caption(s)


def test_a_crash_the_events_cannot_show_comes_from_the_record():
    ev = run_events(0, 0, 5, 10, 100)
    rec = StatusRecord(job="j", phase=Phase.CRASHED, total=100, done=50, heartbeat_at=at(330))
    s = chart.story(ev, rec)
    assert kinds(s) == ["crash"] and s.marks[0].t == T0 + dt.timedelta(seconds=330)
    assert s.finish is None and chart.title(s) == "j: 50 / 100 done (50.0%) — crashed"


@pytest.mark.slow
def test_a_real_kill_and_resume_draw_a_crash_a_gap_and_a_restart(job):
    """A real runner, kill -9'd mid-job, then resumed to the end; the chart comes from its
    own `hsx-runner events` and `status`."""
    from tests.conftest import runner
    from tests.runner.helpers import done_count, kill_group, start_run, status, wait_for

    conf = job(samples=120)
    p = start_run(conf)
    wait_for(lambda: done_count(conf) >= 30 or p.poll() is not None, timeout=120, what="some samples")
    assert p.poll() is None, "finished before the kill"
    kill_group(p.pid)
    p.wait(30)
    wait_for(lambda: status(conf)["phase"] == "crashed", timeout=30, what="crashed")
    runner("run", "--config", conf, check=True, timeout=300)
    events = json.loads(runner("events", "--json", "-n", "5000", "--config", conf, check=True).stdout)[
        "events"
    ]
    rec = StatusRecord.from_dict(status(conf))
    s = chart.story(events, rec)
    assert kinds(s) == ["crash", "resume", "done"], s.marks
    crash, resume, _ = s.marks
    assert crash.until == resume.t > crash.t and resume.done >= crash.done >= 1
    assert len(s.runs) == 2 and s.total == 120 and s.done == 120
    assert chart.title(s).endswith("120 / 120 done (100.0%) — done")
    progress = [e for e in events if e["event"] == "progress"]
    assert progress and all("total" in e and "eta_s" in e for e in progress)
    fig = chart.figure(s)
    assert [ln.get_gid() for ln in fig.axes[0].get_lines() if ln.get_gid()] == [
        "mark:crash",
        "mark:resume",
        "mark:done",
    ]
    with open(os.path.join(os.path.dirname(conf), "chart.png"), "wb") as f:
        f.write(chart.render_png(s))


def test_the_runner_writes_the_counts_the_chart_reads(tmp_path):
    from runner.job.record import Recorder
    from runner.output.ranks import RunPaths

    rec = Recorder(RunPaths(str(tmp_path)), "t", 10, 30.0)
    rec.set_done(3, 0)
    rec.phase(Phase.EXTRACTING)
    with open(tmp_path / "events.jsonl") as f:
        phase, progress = (json.loads(x) for x in f)
    assert (phase["event"], phase["done"], phase["total"]) == ("phase", 3, 10)
    assert progress["event"] == "progress" and (progress["done"], progress["total"]) == (3, 10)
    assert "rate" in progress and "eta_s" in progress
    # each event its own point, at its own time (on a busy box the two differ by a millisecond)
    assert chart.story([phase, progress]).points == [(chart.parse_iso(e["t"]), 3) for e in (phase, progress)]


def test_the_chart_reads_a_local_events_file_with_bad_lines(tmp_path):
    """`/extract chart` where the box is this machine reads the runner's events.jsonl here: a
    line of 5,000 digits, one nested 100,000 deep, one not UTF-8 are passed over, never raised."""
    from bot.watch import history
    from runner.contract.config import from_dict

    out = tmp_path / "out"
    out.mkdir()
    good = [{"event": "progress", "t": "2026-12-03T00:00:00Z", "done": 1}, {"event": "progress", "done": 2}]
    bad = [b'{"done": ' + b"9" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000, b'{"t": "\xff"}']
    lines = [json.dumps(good[0]).encode(), *bad, json.dumps(good[1]).encode()]
    (out / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    cfg = from_dict(
        {
            "job": {"model": "m", "dataset": "d.jsonl", "out": str(out)},
            "remote": {"transport": "local"},
            "watcher": {"state_file": str(tmp_path / "watch.json")},
        }
    )
    assert history.events(cfg) == good
