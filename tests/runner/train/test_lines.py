"""Every line of train.log is input the supervisor survives: a trainer stand-in prints steps of
every bad size and shape, a 3 MB line and a line cut mid-run, then real steps; the real
supervisor runs it, and status, history and the chat's renderings answer with the real steps.
The checkpoint and step regexes take ASCII digits only, and the whole name."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bot.render.summary import train_blocks
from runner.contract.replies import OK
from runner.contract.train import TrainRecord
from runner.contract.train_history import parse_history
from runner.text.training import render_train
from runner.train import progress, record, supervisor
from tests.conftest import RUNNER, write_config
from tests.runner.helpers import wait_for

# The stand-in trainer: bad lines between real steps; it ends (exit 0) once the test lets it.
TRAINER = """import os, sys, time
root = sys.argv[1]
out = sys.stdout
def say(text):
    out.write(text)
    out.flush()
say("step 1: {'loss': 2.0, 'acc': 0.1}\\n")
say("step " + "9" * 5000 + ": {'loss': 1.0, 'acc': 0.5}\\n")
say("step " + "7" * 400 + ": {'loss': 1.0, 'acc': 0.5}\\n")
say("step 2: {'loss': " + "1" * 400 + ", 'acc': 0.2}\\n")
say("step 3: {'loss': nan, 'acc': 0.3}\\n")
say("step 4: {'loss': inf, 'acc': 0.35}\\n")
say("step -5: {'loss': 1.0, 'acc': 0.5}\\n")
say("x" * (3 << 20) + "\\n")
say("step 5: {'loss': 0.5, ")  # cut mid-run: the rest comes after several of the supervisor's polls
time.sleep(2)
say("'acc': 0.55}\\n")
for step in (6, 7, 8):
    say(f"step {step}: {{'loss': {1.0 / step:.3f}, 'acc': 0.6}}\\n")
open(os.path.join(root, "printed"), "w").close()
for _ in range(600):
    if os.path.exists(os.path.join(root, "release")):
        break
    time.sleep(0.1)
open(os.path.join(root, "finished"), "w").close()
"""


def _config(tmp_path) -> str:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    job = {"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/d.jsonl", "out": out}
    return write_config(tmp_path / "hsx.toml", job=job)


def _train(conf: str, action: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNNER, "train", action, "--json", "--config", conf], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_the_supervisor_survives_every_bad_line_and_records_the_real_steps_after_them(tmp_path):
    conf = _config(tmp_path)
    root = tmp_path / "out-train"
    root.mkdir()
    (tmp_path / "trainer.py").write_text(TRAINER)
    argv = [sys.executable, str(tmp_path / "trainer.py"), str(root)]
    (root / "command.json").write_text(json.dumps({"argv": argv, "env": {}}))
    record.Record(str(root), {"phase": "preflight", "launch": "start", "launches": 1, "world": 1, "run_id": "r",
                              "features": str(tmp_path / "out"), "output_dir": str(root / "output"),
                              "total_steps": 8, "step": 0}).write()  # fmt: skip
    sup = subprocess.Popen([sys.executable, "-m", "runner.train.supervisor", str(root)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        wait_for(lambda: (root / "printed").exists(), timeout=60, what="the stand-in's lines")
        d = wait_for(lambda: (d := record.read(str(root)))["step"] == 8 and d, timeout=30, what="step 8")
        assert sup.poll() is None, sup.stderr.read().decode()[-2000:]  # the supervisor lives
        assert d["phase"] == "training" and d["loss"] == 0.125 and d["acc"] == 0.6
        assert d["bad_lines"] == 4, d  # two steps out of range, a negative one, the 3 MB line
        assert d["bad_line"] and len(d["bad_line"]) < 300 and "bytes" in d["bad_line"]

        p = _train(conf, "status")
        assert p.returncode == OK and "Traceback" not in p.stderr, p.stderr
        rec = TrainRecord.from_dict(json.loads(p.stdout))
        assert rec.step == 8 and rec.bad_lines == 4
        assert "step 8 / 8 (100.0%)" in render_train(rec)
        assert "▓" * 20 in train_blocks(rec)[0]["text"]["text"]

        p = _train(conf, "history")
        assert p.returncode == OK and "Traceback" not in p.stderr, p.stderr
        h = parse_history(json.loads(p.stdout))  # what /train chart draws
        points = {pt["step"]: pt for pt in h["points"]}
        assert sorted(points) == [1, 2, 3, 4, 5, 6, 7, 8]
        assert points[2]["loss"] is None and points[2]["acc"] == 0.2  # a 400-digit loss is no number
        assert points[3]["loss"] is None and points[4]["loss"] is None  # nan and inf
        assert points[5] == {"step": 5, "loss": 0.5, "acc": 0.55, "launch": 1}  # the cut line, whole

        (root / "release").touch()
        d = wait_for(lambda: (d := record.read(str(root)))["phase"] == "done" and d, timeout=30, what="done")
        assert d["exit_code"] == 0 and (root / "finished").exists()  # the trainer ended by itself
        assert sup.wait(30) == 0
    finally:
        (root / "release").touch()
        if sup.poll() is None:
            sup.kill()
            sup.wait()


def test_a_step_out_of_bounds_is_a_bad_line_and_never_freezes_the_steps_after_it():
    lines = StepsSeen()
    lines.feed("step 1: {'loss': 2.0}")
    lines.feed("step " + "4" * 400 + ": {'loss': 1.0}")
    lines.feed("step " + "4" * 5000 + ": {'loss': 1.0}")
    lines.feed("step -3: {'loss': 1.0}")
    lines.feed("step 1000000000001: {'loss': 1.0}")
    lines.feed("step 2: {[1]: 2}")  # an unhashable key
    lines.feed("step 2: {'loss': " + "1" * 400 + "}")
    lines.feed("step 3: {'loss': 1.5}")
    assert lines.steps == [1, 2, 3]
    assert lines.s.bad == 5 and "line 6" in lines.s.bad_line and len(lines.s.bad_line) < 300
    assert progress.number(10**400) is None and progress.number(-(10**400)) is None
    assert progress.number(3) == 3.0 and progress.number(True) is None


def test_a_line_over_the_cap_is_counted_unread():
    s = progress.StepLines()
    assert s.feed("step 7: {'loss': 1.0}" + " " * progress.MAX_LINE) == []
    assert s.bad == 1 and "over the 64 KiB" in s.bad_line
    assert s.feed("step 8: {'loss': 1.0}") == [(8, {"loss": 1.0})]


class StepsSeen:
    def __init__(self):
        self.s = progress.StepLines()
        self.steps: list[int] = []

    def feed(self, line: str) -> None:
        self.steps += [step for step, _ in self.s.feed(line)]


def test_checkpoint_and_step_names_take_ascii_digits_and_the_whole_name(tmp_path):
    for name in ("r-step3", "r-step\u0663", "r-step4\n", "r-step\u0665\u0660"):
        os.mkdir(tmp_path / name)
    assert progress.checkpoints(str(tmp_path), "r") == [3]
    assert supervisor._resumes_at([f"training.resume_from={tmp_path}/r-step\u0663"]) is None
    assert supervisor._resumes_at([f"training.resume_from={tmp_path}/r-step3\n"]) is None
    assert supervisor._resumes_at([f"training.resume_from={tmp_path}/r-step3/"]) == 3
    assert progress.parse_steps("step \u0663: {'loss': 1.0}") == []
    assert progress.parse_steps("step 3: {'loss': 1.0}") == [(3, {"loss": 1.0})]
