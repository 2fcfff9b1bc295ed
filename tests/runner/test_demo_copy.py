"""A demo directory copied or moved elsewhere runs its own job: `hsx demo --workdir COPY`
resumes the copy's output and never reads or stops the original (real headless demos)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import pytest

from runner.contract.config import load
from tests.conftest import BIN
from tests.runner.helpers import done_count, status, wait_for

pytestmark = pytest.mark.slow  # `hsx demo` runs real runner processes (torch)

HSX = os.path.join(BIN, "hsx")
SAMPLES = 80
PACE = ["--pace", "0.25"]  # ~16 samples/s: the job cannot finish between its first samples and the Ctrl-C


def demo(workdir) -> subprocess.CompletedProcess:
    return subprocess.run([HSX, "demo", "--stages", "extract", "--workdir", str(workdir), "--samples", str(SAMPLES), "--headless"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def interrupted_demo(work) -> int:
    """A headless demo stopped part-way by Ctrl-C -> its samples done."""
    proc = subprocess.Popen([HSX, "demo", "--stages", "extract", "--workdir", str(work), "--samples", str(SAMPLES), "--headless", *PACE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    conf = str(work / "hsx.toml")
    wait_for(lambda: os.path.exists(conf) and done_count(conf) >= 5, timeout=120, what="some samples")
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    st = status(conf)
    assert st["phase"] == "stopped" and 5 <= st["done"] < SAMPLES, st
    return st["done"]


def test_a_copied_demo_resumes_its_own_output_and_leaves_the_original_alone(tmp_path):
    a, b = tmp_path / "hsx-demo", tmp_path / "other"
    first = interrupted_demo(a)
    assert "runner_config" not in (a / "hsx.toml").read_text()  # the config itself is the job's
    assert load(str(a / "hsx.toml")).remote.runner_config == str(a / "hsx.toml")
    # as an older hsx wrote it: the absolute path of its own config
    (a / "hsx.toml").write_text((a / "hsx.toml").read_text().replace(
        'transport = "local"\n', f'transport = "local"\nrunner_config = "{a}/hsx.toml"\n'))  # fmt: skip
    shutil.copytree(a, b, symlinks=True)  # cp -r hsx-demo other
    p = demo(b)
    assert p.returncode == 0, p.stderr
    assert f"{b} was copied or moved from {a}" in p.stdout, p.stdout
    assert f"Done: {SAMPLES} / {SAMPLES} written" in p.stdout
    st = status(str(b / "hsx.toml"))
    assert st["phase"] == "done" and st["done_this_run"] == SAMPLES - first, st
    assert str(a) not in (b / "hsx.toml").read_text()
    assert load(str(b / "hsx.toml")).server.port != load(str(a / "hsx.toml")).server.port  # both can run
    pinned = json.loads((b / "out" / "dataset.json").read_text())
    assert (pinned["model"], pinned["dataset"]) == (str(b / "model"), str(b / "data.jsonl")), pinned
    # the original: not read, not resumed, not stopped
    st = status(str(a / "hsx.toml"))
    assert (st["phase"], st["done"]) == ("stopped", first), st
    assert json.loads((a / "out" / "dataset.json").read_text())["model"] == str(a / "model")

    # a file that names a directory the copy cannot stand for: refused, nothing run or rewritten
    elsewhere = dict(pinned, model="/srv/models/llama")
    (b / "out" / "dataset.json").write_text(json.dumps(elsewhere))
    p = demo(b)
    assert p.returncode != 0 and "extraction started" not in p.stdout, p.stdout
    assert f"{b}/out/dataset.json names /srv/models/llama as the model, not {b}/model" in p.stderr, p.stderr
    assert json.loads((b / "out" / "dataset.json").read_text()) == elsewhere
