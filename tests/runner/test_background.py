"""A long verify runs in the background on the box: the call that starts it returns at once,
"progress?" shows how far it is, and the watcher posts its result once (restarts included)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal

import pytest

from bot.watcher import Limits, Observation, WatchState, decide
from bot.wiring import make_handlers
from remote.client import GpuBox
from remote.transport import LocalTransport
from runner.contract.config import load
from runner.contract.status import StatusRecord
from runner.store import Store, sample_path
from tests.conftest import RUNNER, runner
from tests.runner.helpers import out_dir, status, wait_for

pytestmark = pytest.mark.slow  # real runner processes (torch)

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
