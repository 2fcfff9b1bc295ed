"""The watcher on the training record: crash (with Resume), NaN loss and the zero loss-and-acc
trap, each once per episode, and done with the export path; the pure judging, then the real
loop against the recording Slack API (the Resume button: test_every_kind_watch.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys

from slack_sdk import WebClient

from bot.watch.train_watch import ZERO_LOGS, TrainLimits, judge
from bot.watch.watcher import Watcher, WatchState, start_watcher
from runner.contract.train import TrainRecord
from runner.text.training import render_train
from tests.runner.helpers import wait_for

from .. import slack_api
from ..verbs.test_train_chat import TRAINING

T0 = dt.datetime(2030, 1, 1, 11, 43, tzinfo=dt.timezone.utc)
CRASHED = {**TRAINING, "phase": "crashed", "launches": 1,
           "reason": "the trainer exited with code 1: RuntimeError: CUDA out of memory; "
                     "the last complete checkpoint is step 50"}  # fmt: skip


NOW = dt.datetime(2026, 12, 1, 12, 1, 30, tzinfo=dt.timezone.utc)  # 30 s after TRAINING's last step


def run(records: list[dict], now: dt.datetime = NOW, kinds=("alert", "done", "recovered")):
    """What judge posts, record after record: (kind, headline, Resume button)."""
    st, out = WatchState(), []
    for d in records:
        acts, st = judge(st, TrainRecord.from_dict(d), now)
        out += [(a.kind, a.text.split("\n")[0], a.resume) for a in acts if a.kind in kinds]
    return out


def test_a_crash_alerts_once_with_resume_and_again_after_the_next_launch_crashes():
    posted = run([TRAINING, CRASHED, CRASHED, {**CRASHED, "launches": 2}])
    assert len(posted) == 2 and all(kind == "alert" and resume for kind, _, resume in posted)
    assert posted[0][1] == ":rotating_light: Training CRASHED"  # the trainer's words are operators'
    (a,) = judge(WatchState(), TrainRecord.from_dict(CRASHED), NOW)[0]
    assert a.private.startswith(":rotating_light: Training CRASHED: RuntimeError: CUDA out of memory\n")
    assert "RuntimeError" not in a.text and "the training crashed; ask an operator for the details" in a.text


def test_a_nan_loss_alerts_once():
    nan = {**TRAINING, "loss": "nan", "nan_loss": True}
    posted = run([TRAINING, nan, {**nan, "step": 61}, {**nan, "step": 62}])
    assert posted == [("alert", ":rotating_light: Training loss is NaN at step 60", False)]


def test_loss_and_acc_zero_over_several_logs_alerts_once():
    zero = {**TRAINING, "loss": 0.0, "acc": 0.0}
    steps = [{**zero, "step": 10 * i} for i in range(1, ZERO_LOGS + 3)]
    assert run([zero] * 5) == []  # the same log read again is not several logs
    posted = run(steps)
    assert len(posted) == 1 and "loss and acc both 0" in posted[0][1]
    assert (
        run([{**zero, "step": 10}, {**zero, "step": 20}, {**TRAINING, "step": 30}, {**zero, "step": 40}])
        == []
    )


def test_done_is_posted_once_with_the_export_path():
    done = {**TRAINING, "phase": "done", "step": 120, "ended_at": "2026-12-01T12:02:00.000Z"}
    posted = run([TRAINING, done, done])
    assert len(posted) == 1 and posted[0][0] == "done"
    _, st = judge(WatchState(), TrainRecord.from_dict(TRAINING), NOW)
    (a,) = judge(st, TrainRecord.from_dict(done), NOW)[0]
    assert "/data/out-train/export" in a.private and "/data/out-train" not in a.text


def test_done_waits_for_the_ends_export_and_posts_the_flags_that_serve_the_draft():
    said = ("exported step 120 to /data/out-train/export; serve it with: python -m sglang.launch_server "
            "--model-path /m --speculative-algorithm EAGLE3 --speculative-draft-model-path /data/out-train/export")  # fmt: skip
    exporting = {**TRAINING, "step": 120, "export": "pending"}
    late = NOW + dt.timedelta(hours=1)  # no step line for an hour: the export, not a stall
    assert run([exporting], now=late) == []
    assert "exporting the draft to /data/out-train/export" in render_train(
        TrainRecord.from_dict(exporting), NOW
    )
    done = {
        **exporting,
        "phase": "done",
        "export": said,
        "export_ok": True,
        "ended_at": "2026-12-01T12:02:00.000Z",
    }
    _, st = judge(WatchState(), TrainRecord.from_dict(exporting), late)
    (a,) = judge(st, TrainRecord.from_dict(done), late)[0]
    assert a.kind == "done" and f"\ndone; {said}" in a.private and "tries again" not in a.private
    assert "\ndone; the draft is exported" in a.text and "/data" not in a.text
    failed = {
        **done,
        "export": "export failed: ValueError: serving state is missing keys",
        "export_ok": False,
    }
    assert "done; export failed: ValueError: serving state is missing keys — `/train export` tries again" in (
        render_train(TrainRecord.from_dict(failed), NOW)
    )


def at(t: dt.datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


STEP_AT = dt.datetime(2026, 12, 1, 13, 0, tzinfo=dt.timezone.utc)
LONG = {**TRAINING, "step": 340, "total_steps": 1000, "log_s": 40.0, "last_step_at": at(STEP_AT)}


def after(s: float) -> dt.datetime:
    return STEP_AT + dt.timedelta(seconds=s)


def judge_all(seq, lim=None) -> list[tuple[str, str, bool]]:
    """(record, now) after (record, now): what judge posts, but the milestones."""
    st, out = WatchState(), []
    for d, now in seq:
        acts, st = judge(st, TrainRecord.from_dict(d), now, lim)
        out += [(a.kind, a.text.split("\n")[0], a.resume) for a in acts if a.kind != "milestone"]
    return out


def test_a_stall_is_several_log_times_never_under_the_floor_and_said_once_then_resolved():
    posted = judge_all([(LONG, after(299)), (LONG, after(12 * 60)), (LONG, after(20 * 60))])
    assert posted == [(
        "alert", ":warning: Training STALLED: no step for 12m at step 340, expected one every ~40s",
        False,  # no Resume button: the live trainer holds its run
    )]  # fmt: skip
    (alert,) = [
        a for a in judge(WatchState(), TrainRecord.from_dict(LONG), after(720))[0] if a.kind == "alert"
    ]
    assert alert.text.endswith(
        "\nthe trainer (pid 4242) still runs, so `/train resume` is refused; a save or an eval pauses the "
        "steps too. If it stays silent: `/train stop`, then `/train resume` from the last durable checkpoint"
    )
    assert "\ntraining — step 340 / 1,000 (34.0%)\n" in alert.text
    slow = {**LONG, "log_s": 100.0}  # five log times: 500 s, over the 300 s floor
    assert judge_all([(slow, after(499))]) == []
    assert [k for k, *_ in judge_all([(slow, after(501))])] == ["alert"]
    first = {**LONG, "log_s": None}  # one step line this launch: the floor alone
    assert judge_all([(first, after(299))]) == [] and len(judge_all([(first, after(301))])) == 1
    moved = {**LONG, "step": 345, "last_step_at": at(after(700))}
    posted = judge_all([(LONG, after(400)), (moved, after(710)), (moved, after(1500))])
    assert [p[:2] for p in posted] == [
        ("alert", posted[0][1]),
        ("recovered", ":white_check_mark: Training STALLED resolved: steps again"),
        ("alert", posted[2][1]),  # a new quiet stretch is a new episode
    ]
    assert "no step for 13m at step 345" in posted[2][1]


def test_loading_past_the_start_up_budget_names_the_phase_once_and_its_first_step():
    lim = TrainLimits(startup_s=1800.0)
    loading = {**TRAINING, "phase": "loading", "step": None, "loss": None, "acc": None, "launches": 2,
               "launched_at": at(STEP_AT), "last_step_at": at(STEP_AT - dt.timedelta(hours=1))}  # fmt: skip
    stepping = {**loading, "phase": "training", "step": 5, "last_step_at": at(after(41 * 60))}
    posted = judge_all(
        [
            (loading, after(1799)),
            (loading, after(31 * 60)),
            (loading, after(40 * 60)),
            (stepping, after(2470)),
        ],
        lim,
    )
    assert posted == [
        ("alert", ":warning: Training still loading the target head and counting the vocab after 31m",
         False),
        ("recovered", ":white_check_mark: Training's first step came after 41m of loading", False),
    ]  # fmt: skip
    (alert,) = judge(WatchState(), TrainRecord.from_dict(loading), after(31 * 60), lim)[0]
    assert alert.text.endswith(
        "\npast the start-up budget of 30m ([watcher] train_startup_s): SpecForge prints nothing until "
        "its first step, and its vocab pass reads every feature file"
    )
    # the step before this launch's start is not this launch's: quiet counts from the launch
    assert judge_all([({**stepping, "last_step_at": at(STEP_AT - dt.timedelta(hours=2))}, after(200))]) == []


def milestones(seq, pct: int = 10) -> list[str]:
    st, out = WatchState(), []
    for d in seq:
        acts, st = judge(st, TrainRecord.from_dict(d), NOW, TrainLimits(milestone_pct=pct))
        out += [a.text.split("\n")[0] for a in acts if a.kind in ("milestone", "done")]
    return out


def test_every_n_percent_of_the_steps_once_per_run_across_a_resume():
    rec = {**TRAINING, "total_steps": 120}
    steps = [5, 12, 13, 40]
    seq = [{**rec, "step": s} for s in steps]
    seq += [{**rec, "phase": "crashed", "step": 61}, {**rec, "phase": "loading", "launches": 2, "step": 61}]
    seq += [{**rec, "step": s, "launches": 2} for s in (45, 50, 119, 120)]  # the last step: done says it
    seq += [{**rec, "phase": "done", "step": 120, "launches": 2, "ended_at": "2026-12-01T12:05:00Z"}]
    assert milestones(seq) == [
        "Training 10% reached", "Training 30% reached", "Training 40% reached", "Training 90% reached",
        ":white_check_mark: Training done",
    ]  # fmt: skip
    other = {**rec, "run_id": "hsx-2", "started_at": "2026-12-02T09:00:00.000Z"}
    assert milestones([{**rec, "step": 60}, {**other, "step": 13}]) == [
        "Training 50% reached",
        "Training 10% reached",  # a new run counts again
    ]
    assert milestones([{**rec, "step": 60}], pct=25) == ["Training 50% reached"]


def test_each_eval_once_with_the_best_acceptance_length_and_done_with_the_final_metrics():
    rec = {**TRAINING, "total_steps": 120, "step": 60, "eval_samples": 8}
    ev = [
        {**rec, "step": 20, "eval_step": 20, "val_acc": 0.21, "acc_len": 1.41, "best_acc_len": 1.41, "best_step": 20},
        {**rec, "step": 25, "eval_step": 20, "val_acc": 0.21, "acc_len": 1.41, "best_acc_len": 1.41, "best_step": 20},
        {**rec, "step": 40, "eval_step": 40, "val_acc": 0.19, "acc_len": 1.38, "best_acc_len": 1.41, "best_step": 20},
    ]  # fmt: skip
    done = {**ev[-1], "phase": "done", "step": 120, "eval_step": 120, "val_acc": 0.42, "acc_len": 1.97,
            "best_acc_len": 1.99, "best_step": 100, "ended_at": "2026-12-01T12:05:00Z"}  # fmt: skip
    posted = [p for p in milestones([*ev, done]) if "% reached" not in p]
    assert posted == [
        ":bar_chart: Training eval at step 20: val acc 21.0% · simulated accept length ~2.41 · new best",
        ":bar_chart: Training eval at step 40: val acc 19.0% · simulated accept length ~2.38 · best ~2.41 at step 20",
        ":white_check_mark: Training done",
    ]
    _, st = judge(WatchState(), TrainRecord.from_dict(ev[-1]), NOW)
    (a,) = [a for a in judge(st, TrainRecord.from_dict(done), NOW)[0] if a.kind == "done"]
    assert (
        "\nheld-out eval at step 120: val acc 42.0% · simulated accept length ~2.97 · best ~2.99 at step 100\n"
        in a.text
    )
    assert a.private.count("/data/out-train/export") == 1  # the record's text says where the export goes
    assert "eval at step" not in judge(WatchState(), TrainRecord.from_dict({**done, "val_acc": None,
        "acc_len": None, "best_acc_len": None}), NOW)[0][-1].text  # fmt: skip


def _posts(api_rec, words: str) -> list[dict]:
    return [p for p in api_rec.named("chat.postMessage") if words in p["text"]]


def test_the_watcher_job_posts_a_stall_and_milestones_once_across_bot_restarts(fake, cfg):
    """The scheduler's job as `hsx bot` runs it, against the fake box: the stall (no Resume), the
    50% and the eval milestones in the progress thread; then two bot restarts (new watchers on the
    same state file) post nothing again, and the next steps say the stall's end and 60% once."""
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))
    now = dt.datetime.now(dt.timezone.utc)
    stalled = {**TRAINING, "step": 60, "log_s": 40.0, "last_step_at": at(now - dt.timedelta(minutes=12)),
               "launched_at": at(now - dt.timedelta(hours=1)), "eval_samples": 8, "eval_step": 60,
               "val_acc": 0.38, "acc_len": 1.86, "best_acc_len": 1.86, "best_step": 60}  # fmt: skip
    fake.reply("train-status", stalled)
    api_rec = slack_api.Recorder()
    server, api = slack_api.start(api_rec)
    client = WebClient(token="xoxb-test", base_url=api)
    scheduler = start_watcher(fake.box(), cfg, client)
    try:
        heads = ("Training STALLED", "Training 50% reached", "Training eval at step 60")
        wait_for(lambda: all(_posts(api_rec, h) for h in heads), 20, what=f"the posts {heads}")
    finally:
        scheduler.shutdown(wait=True)
    try:
        (stall,) = _posts(api_rec, "Training STALLED")
        assert (
            stall["channel"] == "C0ALERTS"
            and "no step for 12m at step 60, expected one every ~40s" in stall["text"]
        )
        blocks = json.loads(stall["blocks"]) if isinstance(stall["blocks"], str) else stall["blocks"]
        assert [b["type"] for b in blocks] == ["section"]  # no Resume button
        (eval_,) = _posts(api_rec, "Training eval at step 60")
        assert "val acc 38.0% · simulated accept length ~2.86 · new best" in eval_["text"]
        assert eval_["thread_ts"] == api_rec.named("pins.add")[0]["timestamp"]
        before = len(api_rec.named("chat.postMessage"))
        for _ in range(2):  # the bot restarted twice: a new watcher on the same state each time
            Watcher(fake.box(), cfg, client).tick()
        assert len(api_rec.named("chat.postMessage")) == before
        fake.reply(
            "train-status", {**stalled, "step": 72, "last_step_at": at(dt.datetime.now(dt.timezone.utc))}
        )
        for _ in range(2):
            Watcher(fake.box(), cfg, client).tick()
        assert len(_posts(api_rec, "Training STALLED resolved")) == 1
        assert (
            len(_posts(api_rec, "Training 60% reached")) == 1
            and len(_posts(api_rec, "Training STALLED")) == 2
        )
        assert len(_posts(api_rec, "Training eval")) == 1 and len(_posts(api_rec, "Training 50%")) == 1
    finally:
        server.shutdown()
        server.server_close()


def test_a_training_post_slack_refused_is_posted_at_the_next_tick_once(fake, cfg):
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))
    fake.reply("train-status", {**TRAINING, "eval_step": 60, "val_acc": 0.38, "acc_len": 1.86})
    api_rec = slack_api.Recorder()
    server, api = slack_api.start(api_rec)
    client = WebClient(token="xoxb-test", base_url=api)
    try:
        api_rec.fail.add("chat.postMessage")
        Watcher(fake.box(), cfg, client, clock=lambda: T0).tick()
        api_rec.fail.clear()
        assert _posts(api_rec, "Training 50% reached") and _posts(api_rec, "Training eval")  # refused
        for _ in range(2):
            Watcher(fake.box(), cfg, client, clock=lambda: T0).tick()
        assert len(_posts(api_rec, "Training 50% reached")) == 2  # the refused one, then once
        assert len(_posts(api_rec, "Training eval at step 60")) == 2
    finally:
        server.shutdown()
        server.server_close()
