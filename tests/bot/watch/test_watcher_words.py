"""What the watcher posts says what the record says: a job that never ran is "not started",
and a crashed record gets its alert, not a milestone (real watcher ticks, recording Slack)."""

from __future__ import annotations

import datetime as dt

from slack_sdk import WebClient

from bot.watch.watcher import Watcher
from remote.client import GpuBox
from remote.transport import LocalTransport
from runner.contract.config import from_dict
from tests.conftest import RUNNER

from .. import slack_api

T0 = dt.datetime(2030, 1, 1, 11, 43, tzinfo=dt.timezone.utc)


def _tick(box, cfg, when) -> list[dict]:
    """One tick of a fresh watcher process -> every chat.postMessage so far."""
    rec = slack_api.Recorder()
    server, api = slack_api.start(rec)
    try:
        Watcher(box, cfg, WebClient(token="xoxb-test", base_url=api), clock=lambda: when).tick()
        return rec.named("chat.postMessage")
    finally:
        server.shutdown()
        server.server_close()


def test_the_first_post_for_a_job_that_never_ran_says_not_started(job, tmp_path):
    conf = job(samples=3)  # a real job whose runner never ran: hsx-runner status reads its out/
    cfg = from_dict(
        {"remote": {"transport": "local", "runner": RUNNER, "runner_config": conf},
         "slack": {"channels": ["C0PROGRESS"], "alert_channel": "C0ALERTS", "audit_log": str(tmp_path / "a.jsonl")},
         "watcher": {"state_file": str(tmp_path / "watch.json")}},
        base_dir=str(tmp_path), source=str(tmp_path / "hsx.toml"),
    )  # fmt: skip
    (first,) = _tick(GpuBox(LocalTransport(), RUNNER, conf, timeout_s=120), cfg, T0)
    assert first["text"].startswith("Not started"), first["text"]
    assert "`/extract start` begins the job" in first["text"] and "on request" not in first["text"]


def test_a_milestone_crossed_by_a_crashed_record_is_left_to_the_crash_alert(fake, cfg):
    total = 37312
    fake.set_status(done=int(total * 0.25), heartbeat_at=T0.isoformat())
    posts = _tick(fake.box(), cfg, T0)
    assert [p["text"].split("\n")[0] for p in posts][1:] == ["20% reached"]
    later = T0 + dt.timedelta(minutes=5)
    fake.set_status(done=int(total * 0.31), phase="crashed", phase_since=later.isoformat())
    posts = _tick(fake.box(), cfg, later)
    (alert,) = [p for p in posts if p["channel"] == "C0ALERTS"]
    assert "CRASHED" in alert["text"] and "31.0% done" in alert["text"], alert["text"]
    assert not [p for p in posts if "% reached" in p["text"]], posts
    fake.set_status(done=int(total * 0.41), phase="extracting", heartbeat_at=later.isoformat())
    posts = _tick(fake.box(), cfg, later + dt.timedelta(minutes=5))
    assert [p["text"].split("\n")[0] for p in posts if "% reached" in p["text"]] == ["40% reached"]
