"""The whole story, real components only: hsx deploy → /extract start → "progress?" → kill -9
→ one crash alert with a Resume button → the button resumes → kill -9 again → two /extract
resume at once start one runner → milestones → done → /extract verify → the tensors equal an
uninterrupted run's. An unauthorized /extract stop changes nothing."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal

from bot.watch.action import RESUME
from tests.conftest import runner, write_job
from tests.runner.helpers import assert_same_tensors, recorded, tensors, wait_for

from .conftest import STRANGER, Ops

SAMPLES = 300
# the alert itself: milestones reached while crashed carry "CRASHED" in their summary too
CRASH_ALERT = ":rotating_light: Extraction CRASHED"
RESUMED = re.compile(r"`resume`: resume\w*: runner pid \d+")


def _status(out: str) -> dict:
    with open(os.path.join(out, "status.json")) as f:
        return json.load(f)


def _done(out: str) -> int:
    return recorded(out)


def _runners(conf_on_box: str) -> list[int]:
    """Live `hsx-runner run` processes for this job (they are on this machine)."""
    pids = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"runner.cli" in argv and b"run" in argv and conf_on_box.encode() in argv:
            pids.append(int(name))
    return pids


def _live_runner(out: str, conf_on_box: str, not_pid: int | None = None) -> int:
    def alive():
        pids = _runners(conf_on_box)
        try:
            st = _status(out)
        except (OSError, ValueError):
            return None
        ok = st["phase"] == "extracting" and st["pid"] != not_pid and pids == [st["pid"]]
        return st["pid"] if ok else None

    return wait_for(alive, timeout=90, what="a runner extracting")


def _kill9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=10, what="the runner gone")


def test_deploy_start_crash_resume_verify(gpu_box, demo_assets, tmp_path):
    job_dir = str(tmp_path / "job")
    conf = gpu_box.ops_config(job_dir, demo_assets, "story", SAMPLES)
    out, on_box = os.path.join(job_dir, "out"), f"{gpu_box.prefix}/story.toml"
    code, rep = gpu_box.deploy(conf)
    assert code == 0 and rep["preflight"]["ok"], rep

    ops = Ops(conf)
    try:
        bot, rec = ops.bot, ops.rec
        assert bot.command("start") == 200
        (resp,) = rec.wait_for("response", timeout=60)
        assert resp["response_type"] == "in_channel" and "started" in resp["text"], resp
        first = _live_runner(out, on_box)
        wait_for(lambda: _done(out) >= 10, timeout=60, what="10 samples")

        # "progress?" gets the terse summary from the GPU box
        bot.event({"type": "message", "channel": "C0PROGRESS", "user": STRANGER, "text": "progress?", "ts": "1.1"}, "Ev1")  # fmt: skip
        answer = wait_for(lambda: ops.posts("C0PROGRESS", f"/ {SAMPLES} —"), timeout=30, what="the answer")
        assert re.match(rf"^[\d,]+ / {SAMPLES} — [\d.]+% done( · [^\n]*)?\n", answer[0]["text"]), answer[0][
            "text"
        ]

        # an unauthorized stop changes nothing, neither typed nor by the confirm button
        bot.command("stop --yes", user=STRANGER)
        bot.click("hsx_stop_confirm", "stop", user=STRANGER)
        refusals = rec.wait_for("response", 3, timeout=30)[1:]
        assert all(r["response_type"] == "ephemeral" and "refused" in r["text"] for r in refusals), refusals
        assert _runners(on_box) == [first] and _status(out)["phase"] == "extracting"
        assert [e["result"][:7] for e in bot.audit()] == ["attempt", "ok", "refused", "refused"]

        # kill -9: one crash alert with a Resume button, however many times the watcher looks
        _kill9(first)
        alerts = wait_for(lambda: ops.posts("C0ALERTS", CRASH_ALERT), timeout=30, what="the crash alert")
        ops.ticks.wait(4)
        assert len(ops.posts("C0ALERTS", CRASH_ALERT)) == 1
        button = alerts[0]["blocks"][-1]["elements"][0]
        assert button["action_id"] == RESUME
        n = len(rec.named("response"))
        assert bot.click(RESUME, button["value"]) == 200
        (resumed,) = rec.wait_for("response", n + 1, timeout=60)[n:]
        assert resumed.get("replace_original") and RESUMED.search(resumed["text"]), resumed
        second = _live_runner(out, on_box, not_pid=first)

        # kill -9 again; two /extract resume at once start exactly one runner
        base = _done(out)
        wait_for(lambda: _done(out) >= base + 5, timeout=60, what="progress after resume")
        _kill9(second)
        try:
            wait_for(
                lambda: len(ops.posts("C0ALERTS", CRASH_ALERT)) == 2, timeout=60, what="the second alert"
            )
        except AssertionError:
            with open(ops.cfg.watcher.state_file) as f:
                seen = f.read()
            raise AssertionError(f"no second alert; status {_status(out)}; watch state {seen}; "
                                 f"alerts {ops.posts('C0ALERTS', '')}") from None  # fmt: skip
        n = len(rec.named("response"))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert list(pool.map(lambda _: bot.command("resume"), range(2))) == [200, 200]
        replies = sorted(r["text"] for r in rec.wait_for("response", n + 2, timeout=60)[n:])
        assert RESUMED.search(replies[1]) and "refused: already running" in replies[0], replies
        third = _live_runner(out, on_box, not_pid=second)
        assert f"pid {third}" in replies[1] and _runners(on_box) == [third]

        # to the end: milestones in the progress thread, one done message, verify says sound
        wait_for(lambda: ops.posts("C0ALERTS", ":white_check_mark:"), timeout=120, what="done")
        assert ops.posts("C0ALERTS", "% reached")
        assert _status(out)["phase"] == "done"
        n = len(rec.named("response"))
        bot.command("verify")  # in the background on the box; the watcher posts its result
        (started,) = rec.wait_for("response", n + 1, timeout=120)[n:]
        assert started["text"].startswith("verify running in the background"), started["text"]
        (verified,) = wait_for(
            lambda: ops.posts("C0ALERTS", "verify finished"), timeout=120, what="the result"
        )
        assert f"{SAMPLES:,} / {SAMPLES:,} sound" in verified["text"], verified["text"]
        assert "every sample is present and sound" in verified["text"]
        assert (
            len(ops.posts("C0ALERTS", CRASH_ALERT)) == 2
            and len(ops.posts("C0ALERTS", ":white_check_mark:")) == 1
        )
    finally:
        ops.close()
        for pid in _runners(on_box):
            os.kill(pid, signal.SIGKILL)

    reference = write_job(tmp_path / "reference", demo_assets, SAMPLES)
    runner("run", "--config", reference, check=True)
    assert_same_tensors(tensors(reference), tensors(conf))
