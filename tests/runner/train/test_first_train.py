"""A new user's first `/train start`, typed while the demo's extraction runs: answered at once,
before any venv is built, with the offer to start at the extraction's end; arranged, the
extraction's end starts the training by itself (all real: the demo's paced extraction, the
SpecForge CPU lane's trainer)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from runner import lanes, specforge_cpu
from runner.contract.config import load
from runner.data import demo_assets
from tests.conftest import runner, specforge_train_python, write_config
from tests.runner.helpers import status, train_status, until

pytestmark = pytest.mark.slow


def _json(*args, code=0) -> dict:
    p = runner(*args, "--json", timeout=600)
    assert p.returncode == code, f"{args} -> {p.returncode}\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout)


def test_a_start_during_the_extraction_answers_at_once_and_can_start_at_its_end(tmp_path, monkeypatch):
    specforge_train_python()
    conf = demo_assets.build(str(tmp_path / "d"), 24, 0)
    monkeypatch.setenv(demo_assets.PACE_ENV, "1.0")  # 24 samples, 4 at a time: some seconds to ask in
    # the same job with an interpreter of a lane not built yet: a start that built it would be minutes
    envs = tmp_path / "envs"
    fresh = tmp_path / "d" / "fresh.toml"  # beside it: its paths are relative to its folder
    unbuilt = os.path.join(specforge_cpu.venv_dir(str(envs)), "bin", "python")
    fresh.write_text(
        open(conf).read().replace(f'python = "{load(conf).train.python}"', f'python = "{unbuilt}"')
    )
    assert load(str(fresh)).train.python == unbuilt
    assert _json("start", "--config", conf)["started"]
    st = until(lambda: status(conf), lambda st: st["phase"] == "extracting", 120, 0.2, "the extraction")
    # held while it is asked (SIGSTOP: its lock stays held, nothing more is extracted): on the busy
    # machine a paced extraction ended before the ask reached it
    os.kill(st["pid"], signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        rep = _json("train", "start", "--config", str(fresh), code=3)
        took = time.monotonic() - t0  # a start that built the lane would be minutes
        assert took < 60 and not rep["started"] and rep.get("offer") == "after-extraction", (took, rep)
        assert (
            "train when it is done" in rep["reason"] and "hsx-runner train after-extraction" in rep["reason"]
        )
        assert (
            not envs.exists() and not (tmp_path / "d" / "out-train").exists()
        )  # nothing built, nothing written
        said = _json("train", "after-extraction", "--config", conf)
        assert said["arranged"] and "starts by itself when the extraction ends" in said["message"]
    finally:
        os.kill(st["pid"], signal.SIGCONT)
    st = until(
        lambda: status(conf), lambda st: st["phase"] == "done" and st.get("handoff") != "pending", 300, 0.5,
        "the extraction's end and its hand-off",
    )  # fmt: skip
    assert st["handoff"].startswith("training started (after_extraction): training started"), st
    assert not os.path.exists(os.path.join(load(conf).job.out, "train-after-extraction.json"))  # taken, once
    train = _json("train", "status", "--config", conf)
    assert train["launches"] == 1 and train["phase"] in ("preflight", "loading", "training", "done"), train
    runner("train", "stop", "--config", conf, timeout=120)


def test_a_venv_build_says_its_step_and_index_to_a_status_read_meanwhile(tmp_path):
    """While a first start builds the trainer's venv, `train status` (what "progress?" reads) says
    which step it is at and which index pip uses; after it, nothing."""
    import threading

    from runner.contract.train import TrainRecord
    from runner.text.training import render_train

    root = str(tmp_path / "envs")
    python = os.path.join(specforge_cpu.venv_dir(root), "bin", "python")
    gate = tmp_path / "gate"
    conf = tmp_path / "hsx.toml"
    write_config(conf, job={"model": "m", "dataset": "d.jsonl", "out": "out"}, train={"python": python})
    said: list[str] = []
    wait = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
    steps = lambda py: [("the dependencies (a stand-in)", [sys.executable, "-c", wait])]  # noqa: E731
    build = threading.Thread(target=specforge_cpu.LANE.build, args=(root, steps), kwargs={"say": said.append})
    build.start()
    try:

        def building(st):
            assert build.is_alive(), st
            return "step 2/2" in (st.get("building") or "")

        st = until(lambda: train_status(conf), building, 120, what="the build's second step")
        assert "SpecForge CPU venv, step 2/2: the dependencies (a stand-in) (from " in st["building"], st
        index = lanes.pip_index()  # the first line of progress names it, and so does the status
        assert said[0].endswith(f": building from {index}") and st["building"].endswith(f"(from {index})"), (
            said
        )
        text = render_train(TrainRecord.from_dict(st))
        assert text.startswith("training: building the trainer's venv: SpecForge CPU venv, step 2/2"), text
    finally:
        gate.touch()
        build.join(60)
    assert _json("train", "status", "--config", str(conf)).get("building") is None
