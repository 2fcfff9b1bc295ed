"""The watcher on the regeneration: a crash or failure alerts once per launch with a Resume button,
a restart and a stall once each, 25/50/75% of the rows once each in the thread, and done with the
rows regenerated and not (the output's path for operators only); the pure judging, then the real
loop on a run dir the real `hsx-runner regenerate` reads (the Resume button on a fake runner's
record: test_every_kind_watch.py)."""

from __future__ import annotations

import datetime as dt
import json

from slack_sdk import WebClient

from bot.watch.regenerate_watch import judge
from bot.watch.watcher import Watcher, WatchState
from runner.contract.config import from_dict
from runner.contract.regenerate import RegenerateRecord

from ..http_bot import serve
from ..verbs.test_regenerate_chat import CRASHED, RUNNING

NOW = dt.datetime(2026, 12, 1, 12, 10, tzinfo=dt.timezone.utc)
DONE = {**RUNNING, "phase": "done", "done": 64, "heartbeat": "2026-12-01T12:09:00Z",
        "ended_at": "2026-12-01T12:09:00Z", "eta_s": None}  # fmt: skip


def run(records: list[dict], now: dt.datetime = NOW, stall_s: float = 300.0, kinds=("alert", "done")):
    """What judge posts, record after record: (kind, headline, Resume button)."""
    st, out = WatchState(), []
    for d in records:
        acts, st = judge(st, RegenerateRecord.from_dict(d), now, stall_s)
        out += [(a.kind, a.text.split("\n")[0], a.resume) for a in acts if a.kind in kinds]
    return out


def test_a_crash_alerts_once_per_launch_with_resume_and_the_reason_for_operators():
    posted = run([CRASHED, CRASHED, {**CRASHED, "pid": 6000}, {**CRASHED, "pid": 6000}])
    assert posted == [("alert", ":rotating_light: Regeneration CRASHED", True)] * 2
    (a,) = [a for a in judge(WatchState(), RegenerateRecord.from_dict(CRASHED), NOW)[0] if a.kind == "alert"]
    assert a.key.startswith("regenerate:") and "is gone; /data/x" in a.private
    assert "/data" not in a.text and "the regeneration crashed; ask an operator" in a.text
    failed = {
        **CRASHED,
        "phase": "failed",
        "ended_at": "2026-12-01T12:09:00Z",
        "reason": "restart cap 2 spent",
    }
    assert run([failed, failed]) == [("alert", ":rotating_light: Regeneration FAILED", True)]


def _rank(r: int, state: str, job: str = "9", **kw) -> dict:
    return {
        "rank": r,
        "lo": 32 * r,
        "hi": 32 * (r + 1),
        "state": state,
        "job": f"{job}_{r}",
        "total": 32,
        **kw,
    }


def test_on_slurm_a_lost_rank_alerts_at_once_and_the_runs_failure_is_that_alert():
    """A rank killed while the other runs on: said now (the run reads regenerating until the other
    ends, maybe hours later), once per rank and task, with Resume; the run's failed that follows
    is the same story; the rank resubmitted and lost again is a new one."""
    lost = _rank(
        1, "failed", slurm="FAILED", node="gpu-2", reason="ServerError: restart cap 3 spent at /data/x"
    )
    live = {**RUNNING, "ranks": [_rank(0, "running", slurm="RUNNING", node="gpu-1"), lost]}
    ended = {**live, "phase": "failed", "ended_at": "2026-12-01T12:09:00Z", "reason": "rank 1 FAILED on gpu-2",
             "ranks": [_rank(0, "done"), lost]}  # fmt: skip
    said = ("alert", ":rotating_light: Regeneration rank 1 FAILED (node gpu-2)", True)
    assert run([live, live, ended]) == [said]
    (a,) = [a for a in judge(WatchState(), RegenerateRecord.from_dict(live), NOW)[0] if a.kind == "alert"]
    assert "restart cap 3 spent at /data/x" in a.private and "/data" not in a.text
    again = {**ended, "ranks": [_rank(0, "done"), {**lost, "job": "12_1"}]}
    assert run([ended, again]) == [said, said]
    unwritten = {**RUNNING, "phase": "crashed", "reason": "every row is committed but the output is not written",
                 "ranks": [_rank(0, "done"), _rank(1, "done")]}  # fmt: skip
    assert run([unwritten]) == [("alert", ":rotating_light: Regeneration CRASHED", True)]


def test_a_server_restart_alerts_once_per_count_its_death_for_operators():
    died = {**RUNNING, "restarts": 1, "last_death": "rank 0 died: CUDA error at /data/log"}
    posted = run([RUNNING, died, died])
    assert posted == [("alert", ":warning: Regeneration's server restarted (1 so far)", False)]
    (a,) = [a for a in judge(WatchState(), RegenerateRecord.from_dict(died), NOW)[0] if a.kind == "alert"]
    assert "CUDA error" in a.private and "CUDA error" not in a.text


def test_no_row_for_the_stall_bound_alerts_once_without_a_button():
    beat = {**RUNNING, "heartbeat": "2026-12-01T12:04:00Z"}  # 6 minutes before NOW
    assert run([beat], stall_s=400.0) == []
    posted = run([beat, beat], stall_s=300.0)
    assert posted == [("alert", ":warning: Regeneration STALLED: no row committed for 6m00s (30 / 64 rows)",
                       False)]  # fmt: skip
    (a,) = [a for a in judge(WatchState(), RegenerateRecord.from_dict(beat), NOW)[0] if a.kind == "alert"]
    assert "`/regenerate stop`, then `/regenerate resume`" in a.text
    assert run([{**beat, "phase": "starting_server"}]) == []  # the server's lifecycle bounds its start-up
    moving = {**RUNNING, "done": 40, "heartbeat": "2026-12-01T12:09:50Z"}
    again = {**moving, "heartbeat": "2026-12-01T12:04:00Z"}  # rows came, then a new silence
    heads = [h for _, h, _ in run([beat, moving, again])]
    assert heads == [posted[0][1], posted[0][1].replace("(30 / 64", "(40 / 64")]


def test_a_quarter_of_the_rows_once_each_in_the_thread_and_done_says_the_rows():
    at = [{**RUNNING, "done": n} for n in (10, 16, 17, 33, 33, 60)]
    resumed = {**RUNNING, "done": 60, "pid": 6000}  # a resume keeps the run: nothing again
    posted = run([*at, resumed, DONE, DONE], kinds=("milestone", "done"))
    assert [h for _, h, _ in posted] == [
        "Regeneration 25% reached",
        "Regeneration 50% reached",
        "Regeneration 75% reached",
        ":white_check_mark: Regeneration done: 62 rows regenerated, 2 not",
    ]
    (done,) = [a for a in judge(WatchState(), RegenerateRecord.from_dict(DONE), NOW)[0] if a.kind == "done"]
    assert done.text.splitlines()[1] == "regeneration done — 64 / 64 rows (100.0%)"
    assert "2 rows not regenerated, each listed with its reason" in done.text
    assert "/data" not in done.text
    assert "written: /data/chat.regenerated.jsonl" in done.private
    assert "rows not regenerated: /data/chat.regenerated.failed.jsonl" in done.private
    skipped = run([{**RUNNING, "done": 50}], kinds=("milestone",))  # a jump says where it is
    assert skipped == [("milestone", "Regeneration 75% reached", False)]
    assert run([{**RUNNING, "started_at": None, "phase": "stopped"}]) == []  # never started


def test_the_watcher_asks_nothing_of_the_regeneration_while_its_section_is_as_its_defaults(fake, cfg):
    fake.reply("regenerate-status", CRASHED)
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        Watcher(fake.box(), cfg, WebClient(token="x", base_url=bot.api), clock=lambda: NOW).tick()
    assert "regenerate" not in fake.verbs()


def test_a_run_dir_whose_supervisor_is_gone_alerts_once_through_the_real_runner(tmp_path):
    """The real `hsx-runner regenerate status` reads a status.json left regenerating with no
    supervisor holding its lock as crashed; the watcher says it once, and its Resume button reaches
    the real runner's resume (refused here: there is no dataset), audited."""
    from tests.conftest import RUNNER, write_config

    run_dir = tmp_path / "out-regenerate"
    run_dir.mkdir()
    left = {"phase": "regenerating", "pid": 999999, "started_at": "2026-12-01T12:00:00Z",
            "heartbeat": "2026-12-01T12:05:00Z", "done": 5, "total": 10}  # fmt: skip
    (run_dir / "status.json").write_text(json.dumps(left))
    job = write_config(
        tmp_path / "job.toml",
        job={"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/data.jsonl", "out": f"{tmp_path}/out"},
        regenerate={"run_dir": str(run_dir)},
    )
    cfg = from_dict(
        {
            "remote": {"transport": "local", "runner": RUNNER, "runner_config": job},
            "slack": {
                "alert_channel": "C0ALERTS",
                "operators": ["U0OPERATOR"],
                "audit_log": str(tmp_path / "ops" / "audit.jsonl"),
            },  # fmt: skip
            "watcher": {"state_file": str(tmp_path / "ops" / "watch.json")},
            "regenerate": {"run_dir": str(run_dir)},
        },
        base_dir=str(tmp_path),
        source=str(tmp_path / "ops.toml"),
    )
    from bot.wiring import open_box

    box = open_box(cfg)
    with serve(cfg, box=box) as (bot, _, _):
        for _ in range(2):
            Watcher(box, cfg, WebClient(token="x", base_url=bot.api), clock=lambda: NOW).tick()
        crashes = [p for p in bot.rec.named("chat.postMessage") if "Regeneration CRASHED" in p["text"]]
        (alert,) = [p for p in crashes if p["channel"] == "C0ALERTS"]
        (dm,) = [p for p in crashes if p["channel"] == "U0OPERATOR"]
        assert "5 / 10 rows" in alert["text"] and "pid 999999" in dm["text"]
        blocks = json.loads(alert["blocks"]) if isinstance(alert["blocks"], str) else alert["blocks"]
        assert bot.click("hsx_resume", blocks[1]["elements"][0]["value"]) == 200
        (resp,) = bot.rec.wait_for("response")
        assert "`regenerate resume` refused: no dataset at" in resp["text"]
        assert [(e["action"], e["result"]) for e in bot.audit()] == [
            ("regenerate resume", "attempt"),
            ("regenerate resume", "refused"),
        ]
