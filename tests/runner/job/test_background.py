"""A long verify runs in the background on the box: the call that starts it returns at once,
"progress?" shows how far it is, and the watcher posts its result once (restarts included)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess

import pytest

from bot.watch.watcher import Limits, Observation, WatchState, decide
from bot.wiring import make_handlers
from remote.client import GpuBox
from remote.transport import LocalTransport
from runner.contract.config import load
from runner.contract.status import StatusRecord
from runner.output.store import Store, sample_path
from tests.conftest import RUNNER, runner
from tests.runner.helpers import out_dir, status, wait_for

FILES = 2000
ROW = {"input_ids": [5, 6, 7, 8, 9, 10, 11, 12], "loss_mask": [0, 0, 1, 1, 1, 1, 1, 1]}


def _output_of(job) -> str:
    """A complete output of FILES samples: one extracted for real, the rest its copies (the
    rows are identical, so the copies are what a run would write)."""
    conf = job(rows=[json.dumps(ROW) + "\n"] * FILES)
    text = open(conf).read()
    data = os.path.join(os.path.dirname(conf), "data.jsonl")
    one = os.path.join(os.path.dirname(conf), "one.jsonl")
    shutil.copy(data, one)
    with open(one, "w") as f:
        f.write(json.dumps(ROW) + "\n")
    open(conf, "w").write(text.replace('dataset = "data.jsonl"', 'dataset = "one.jsonl"'))
    runner("run", "--config", conf, check=True)
    open(conf, "w").write(text)
    out = out_dir(conf)
    src = sample_path(out, 0)
    (entry,) = Store(out).manifest().values()
    os.remove(os.path.join(out, "dataset.json"))  # the real job has FILES rows
    store = Store(out)
    for idx in range(1, FILES):
        os.makedirs(os.path.dirname(sample_path(out, idx)), exist_ok=True)
        shutil.copyfile(src, sample_path(out, idx))
        store.append_manifest(idx, entry["seq"], entry["bytes"], entry["checksum"], entry["shard"])
    runner("run", "--config", conf, check=True)  # writes dataset.json for FILES rows; nothing to do
    assert status(conf)["done"] == FILES
    return conf


@pytest.mark.slow
def test_verify_of_2000_samples_outlives_its_call_shows_progress_and_posts_the_result_once(job, tmp_path):
    conf = _output_of(job)
    cfg = load(conf)
    box = GpuBox(LocalTransport(), RUNNER, conf, timeout_s=30)
    h = make_handlers(cfg, box)
    reply = h.ask("verify", "U0OP", operator=True)
    assert reply.text.startswith("verify running in the background on the GPU box (pid "), reply.text
    pid = reply.extra["reply"]["pid"]
    # catch it part-way and hold it there: progress? tells how far it is
    bg = wait_for(lambda: (b := status(conf).get("background") or {}).get("done") and b["done"] < FILES and b,
                  timeout=60, every=0.02, what="verify part-way")  # fmt: skip
    os.kill(pid, signal.SIGSTOP)
    try:
        text = h.ask("progress?", "anyone").text
        line = next(x for x in text.splitlines() if x.startswith("verify: "))
        assert f" / {FILES:,} files" in line and "/s" in line and "ETA" in line, line
        again = h.ask("verify", "U0OP", operator=True)  # one background job at a time
        assert again.text.startswith("`verify` refused: a background verify is running"), again.text
    finally:
        os.kill(pid, signal.SIGCONT)
    assert bg["verb"] == "verify" and bg["total"] == FILES
    wait_for(lambda: (status(conf).get("background") or {}).get("state") == "done", timeout=120, what="done")
    now = dt.datetime.now(dt.timezone.utc)
    rec = StatusRecord.from_dict(status(conf))
    acts, st = decide(WatchState(), Observation(now, record=rec), Limits())
    (result,) = [a for a in acts if a.kind == "result"]
    assert result.text.startswith(f"verify finished: verify: {FILES:,} / {FILES:,} sound"), result.text
    assert "every sample is present and sound" in result.text
    path = str(tmp_path / "watch.json")  # across a bot restart: the state on disk remembers it
    st.save(path)
    acts, _ = decide(WatchState.load(path), Observation(now, record=rec), Limits())
    assert not [a for a in acts if a.kind == "result"]
    assert "verify:" not in h.ask("progress?", "anyone").text  # finished: no progress line


def test_progress_is_written_at_most_once_an_interval_then_the_result(tmp_path, monkeypatch):
    from runner.contract import timing
    from runner.job import background

    monkeypatch.setenv(timing.ENV, "production")  # 1 s: the calls below come well within it
    out = str(tmp_path)
    prog = background.Progress(out, "verify", ["--quick"])
    rec = background.read(out)
    assert (
        rec["state"] == "running" and rec["pid"] == os.getpid() and rec["done"] == 0 and rec["total"] is None
    )
    prog(1, 100, 10)
    prog(2, 100, 20)  # within the interval: not written
    assert background.read(out)["done"] == 1
    prog._last -= timing.PRODUCTION.background_write_s  # as if the interval had passed
    prog(3, 100, 30)
    rec = background.read(out)
    assert rec["done"] == 3 and rec["total"] == 100 and rec["bytes"] == 30
    assert rec["files_per_s"] > 0 and rec["eta_s"] == pytest.approx(97 / rec["files_per_s"])
    prog(100, 100, 1000)  # the last file is always written
    assert background.read(out)["done"] == 100
    prog.finish({"ok": 100, "complete": True})
    rec = background.read(out)
    assert rec["state"] == "done" and rec["result"] == {"ok": 100, "complete": True}
    assert rec["eta_s"] == 0 and rec["error"] is None


def test_a_verb_that_dies_or_raises_leaves_a_record_that_says_so(tmp_path):
    from runner.job import background

    out = str(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now
    with open(background.path(out), "w") as f:
        json.dump({"verb": "verify", "state": "running", "pid": gone.pid}, f)
    assert background.read(out)["state"] == "crashed"
    with pytest.raises(ValueError), background.recording(out, "adopt", ["/d"], on=True):
        raise ValueError("boom")
    rec = background.read(out)
    assert rec["verb"] == "adopt" and rec["state"] == "failed" and rec["error"] == "ValueError: boom"


def _verifies(conf: str) -> list[int]:
    """The detached verify processes of this job (hsx-runner verify --record)."""
    found = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--record" in argv and conf.encode() in argv and b"verify" in argv:
            found.append(int(d))
    return found


def test_simultaneous_background_starts_run_exactly_one(job):
    """Four `hsx-runner verify --background` at once: one runs, the others are refused and
    name it. The dataset is a FIFO, so the one that runs waits there, running, until killed."""
    from runner.job import background

    conf = job(samples=3)
    data = os.path.join(os.path.dirname(conf), "data.jsonl")
    os.remove(data)
    os.mkfifo(data)
    starts = [
        subprocess.Popen([RUNNER, "verify", "--background", "--json", "--config", conf], stdout=subprocess.PIPE,
                         text=True)
        for _ in range(4)
    ]  # fmt: skip
    try:
        replies = [json.loads(p.communicate(timeout=120)[0]) for p in starts]
        (one,) = [r for r in replies if r["started"]]
        refused = [r["reason"] for r in replies if not r["started"]]
        assert refused == [f"a background verify is running (pid {one['pid']})"] * 3, replies
        assert background.read(out_dir(conf))["pid"] == one["pid"]
        assert _verifies(conf) == [one["pid"]]
    finally:
        for pid in _verifies(conf):
            os.killpg(pid, signal.SIGKILL)
