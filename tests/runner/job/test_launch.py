"""Two launches of one run at once (two operators, a typed start and a Resume click, a pipeline's
start; issue 47): one starts, the other is refused naming it, and nothing writes `crashed` over the
running one's record, as the loser once did when its own supervisor found the lock taken. Real
detached processes (tests/runner/job/sleepy.py holds the lock)."""

from __future__ import annotations

import dataclasses
import os
import threading

from runner.contract.replies import OK, REFUSED
from runner.job import supervised
from runner.pipeline.record import KIND

SLEEPY = dataclasses.replace(KIND, module="tests.runner.job.sleepy")


def test_two_launches_at_once_start_one_and_the_other_leaves_its_record_alone(tmp_path):
    root = str(tmp_path / "run")
    os.makedirs(root)
    conf = tmp_path / "hsx.toml"
    conf.write_text("")
    said: list = []
    gate = threading.Barrier(2)

    def go() -> None:
        gate.wait()
        said.append(supervised.launch(SLEEPY, root, str(conf), "started"))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        codes = sorted(r.code for r in said)
        assert codes == [OK, REFUSED], [r.text for r in said]
        (won,) = [r for r in said if r.code == OK]
        (lost,) = [r for r in said if r.code == REFUSED]
        assert f"(pid {won.payload()['pid']})" in lost.text  # the loser names the run it found
        assert supervised.Record.load(SLEEPY, root).d["phase"] == "preflight"  # never crashed over it
    finally:
        assert supervised.stop(root, 30, "holds it").payload()["stopped"]
