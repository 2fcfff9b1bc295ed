"""Disk exhaustion, the seeds' root cause: the output on a small tmpfs. The runner pauses before
it runs out (phase paused, the reason, the projected need), the bot alerts once, no partial file
is left; once space is freed, /extract resume finishes the job."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import runner
from tests.runner.helpers import wait_for

from .conftest import REQUIRE_ENV, Ops
from .test_story import _done, _status

SAMPLES = 160
MB = 1_000_000
ALERT = ":rotating_light: Disk will run out"


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"mounting a tmpfs needs root ({REQUIRE_ENV} is set)")
        pytest.skip("mounting a tmpfs needs root")
    out = tmp_path / "job" / "out"
    out.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "hsx-test", str(out)], check=True)
    yield str(out)
    subprocess.run(["umount", "-l", str(out)], check=False)


def test_full_disk_pauses_alerts_once_then_resume_finishes(gpu_box, demo_assets, tmp_path, small_disk):
    out = small_disk
    ballast = os.path.join(out, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * 14 * MB)
    conf = gpu_box.ops_config(
        str(tmp_path / "job"),
        demo_assets,
        "disk",
        SAMPLES,
        min_free_bytes=4 * MB,
        concurrency=2,
        disk_recheck_s=600.0,  # the pause ends by /extract resume, not by a timer racing it
    )
    code, rep = gpu_box.deploy(conf)
    bad = [c["name"] for c in rep["preflight"]["checks"] if not c["ok"]]
    assert code == 1 and bad == ["disk"], rep  # deployed; preflight sees the worst case will not fit

    ops = Ops(conf)
    try:
        bot, rec, box = ops.bot, ops.rec, ops.rt.handlers.box
        bot.command("start")  # preflight sees the worst case will not fit: refused, nothing started
        refused, own = rec.wait_for("response", 2, timeout=60)  # the channel's, then the asker's
        assert "preflight refused the start: disk:" in refused["text"], refused["text"]
        assert str(out) not in refused["text"] and str(out) in own["text"], own["text"]
        assert not os.path.exists(os.path.join(out, "status.json"))
        bot.command("start --force")  # the operator knows better (samples are smaller): it runs
        forced = rec.wait_for("response", 3, timeout=60)[2]
        assert "refused" not in forced["text"], forced["text"]
        outcomes = [(e["action"], e["result"]) for e in bot.audit() if e["result"] != "attempt"]
        assert outcomes[-2:] == [("start", "refused"), ("start --force", "ok")]
        paused = wait_for(
            lambda: (s := box.status()).phase.value == "paused" and s, timeout=90, what="the pause"
        )
        assert paused.alive and "disk low" in paused.reason, paused.reason
        assert paused.disk.need and paused.disk.need > paused.disk.free, paused.disk
        assert 0 < paused.done < SAMPLES and paused.errors_this_run == 0
        # nothing half-written: no temp files, every committed sample loads
        assert os.listdir(os.path.join(out, ".tmp")) == []
        shards = [
            n for d in os.listdir(out) if d.startswith("rows_") for n in os.listdir(os.path.join(out, d))
        ]
        assert shards and all(n.endswith(".ckpt") for n in shards)
        quick = runner("verify", "--json", "--quick", "--config", conf)
        assert '"corrupt": []' in quick.stdout, quick.stdout

        # still paused a few watcher polls later, and alerted once
        done_at_pause = _done(out)
        wait_for(lambda: len(rec.named("chat.postMessage")) > 0, timeout=10)
        ops.ticks.wait(6)
        assert _status(out)["phase"] == "paused" and _done(out) == done_at_pause
        assert len(ops.posts("C0ALERTS", ALERT)) == 1, ops.posts("C0ALERTS", ALERT)

        # the pause names what compacting would free; an operator compacts from chat, beside the
        # paused runner, in the background: the watcher posts what it freed
        assert "raw samples would free ~" in paused.reason, paused.reason
        box_conf = ops.cfg.remote.runner_config  # the job's config as deployed to the box
        with open(box_conf) as f:
            text = f.read()
        with open(box_conf, "w") as f:
            f.write(text.replace("[job]\n", '[job]\nstorage = "ckpt.gz"\n', 1))
        n = len(rec.named("response"))
        bot.command("compact")
        (started,) = rec.wait_for("response", n + 1, timeout=60)[n:]
        assert started["text"].startswith("compact running in the background"), started["text"]
        (compacted,) = wait_for(
            lambda: ops.posts("C0ALERTS", "compact finished"), timeout=120, what="compact's result"
        )
        assert f"compact to ckpt.gz: {done_at_pause:,} samples re-encoded" in compacted["text"], compacted
        assert "freed" in compacted["text"] and [e["action"] for e in bot.audit()][-1] == "compact"
        assert _status(out)["phase"] == "paused"

        os.unlink(ballast)
        n = len(rec.named("response"))
        bot.command("resume")
        (resumed,) = rec.wait_for("response", n + 1, timeout=60)[n:]
        assert "refused" not in resumed["text"], resumed["text"]
        wait_for(lambda: _status(out)["phase"] == "done", timeout=120, what="the job done")
        n = len(rec.named("response"))
        bot.command("verify")
        (started,) = rec.wait_for("response", n + 1, timeout=120)[n:]
        assert started["text"].startswith("verify running in the background"), started["text"]
        (verified,) = wait_for(
            lambda: ops.posts("C0ALERTS", "verify finished"), timeout=120, what="the result"
        )
        assert "every sample is present and sound" in verified["text"], verified["text"]
        assert len(ops.posts("C0ALERTS", ALERT)) == 1
    finally:
        ops.close()
        if _status(out).get("alive"):
            runner("stop", "--config", conf)
