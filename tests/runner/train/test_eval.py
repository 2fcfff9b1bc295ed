"""The held-out split, SpecForge's eval lines and the run's history, without the trainer: the
real supervisor watches a stand-in that prints lines recorded from SpecForge 0.2.0's own run
(tests/runner/train/test_demo_train.py proves the same with the real trainer)."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys

import pytest

from runner.contract.errors import ConfigError
from runner.contract.train import TrainRecord
from runner.text.training import render_train
from runner.train import history, progress, record, runspec, split
from tests.conftest import ROOT, runner, write_config
from tests.runner.train.units import _cfg, _model

# recorded from SpecForge 0.2.0 on the demo (ttt_length 3, log_interval 5, eval every 20)
STEP20 = (
    "step 20: {'acc_0': 0.2181818187236786, 'acc_1': 0.2181818187236786, 'acc_2': 0.2181818187236786, "
    "'ploss_0': 1.8919512033462524, 'ploss_1': 1.8919185400009155, 'ploss_2': 1.8919105529785156, "
    "'acc': 0.2181818187236786, 'loss': 4.616308689117432, 'acceptance_rate_0': 0.9491589665412903, "
    "'acceptance_rate_1': 0.9494353532791138, 'acceptance_rate_2': 0.9495090246200562, "
    "'acceptance_rate': 0.9493678212165833, 'grad_norm': 0.055045533925294876, 'lr': 0.0007505142768663206, "
    "'perf/optimizer_steps_per_hour': 4658.697152329449, 'perf/optimizer_step_time_s': 0.7727482346002944, "
    "'perf/data_wait_time_s': 0.009814941199874739, 'perf/train_compute_time_s': 0.7628146191997075, "
    "'perf/durable_ack_time_s': 0.0, 'perf/global_samples_per_second': 1.2940825423137357}"
)
EVAL20 = (
    "step 20: {'eval/avg_loss': 6.706592070702279, 'eval/avg_acc': 0.031746031746031744, "
    "'eval/per_position_acc': [0.031746031746031744, 0.09126984126984126, 0.10714285714285714], "
    "'eval/simulated_acc_len': 0.03495392866141165, 'eval/acceptance_rate_0': 0.9417122823176998, "
    "'eval/acceptance_rate_1': 0.9419758287986907, 'eval/acceptance_rate_2': 0.9420268216935714, "
    "'eval/ploss_0': 2.7486349880105196, 'eval/ploss_1': 2.748586958705789, 'eval/ploss_2': 2.748574658195571}"
)
PERF = 0.7727482346002944  # STEP20's perf/optimizer_step_time_s


def step(n: int, loss: str = "4.616308689117432") -> str:
    return STEP20.replace("step 20:", f"step {n}:").replace("'loss': 4.616308689117432", f"'loss': {loss}")


def evaluation(n: int, acc: float, acc_len: float) -> str:
    return (
        EVAL20.replace("step 20:", f"step {n}:")
        .replace("'eval/avg_acc': 0.031746031746031744", f"'eval/avg_acc': {acc}")
        .replace("'eval/simulated_acc_len': 0.03495392866141165", f"'eval/simulated_acc_len': {acc_len}")
    )


def test_eval_lines_are_told_from_step_lines_and_a_trackers_train_keys_read_plain():
    s, m = progress.parse_step(EVAL20)
    assert s == 20 and progress.is_eval(m) and m["eval/simulated_acc_len"] == 0.03495392866141165
    assert m["eval/per_position_acc"][2] == 0.10714285714285714
    s, m = progress.parse_step(STEP20)
    assert s == 20 and not progress.is_eval(m) and m["loss"] == 4.616308689117432
    _, m = progress.parse_step("step 5: {'train/loss': 2.5, 'train/acc': 0.25, 'eval/x': 1}")
    assert m["loss"] == 2.5 and m["acc"] == 0.25
    rec = record.Record("/nowhere", {})
    rec.eval_line(20, progress.parse_step(evaluation(20, 0.5, 1.9))[1])
    rec.eval_line(40, progress.parse_step(evaluation(40, 0.6, 2.1))[1])
    rec.eval_line(60, progress.parse_step(evaluation(60, 0.55, 2.0))[1])
    d = rec.d
    assert (d["val_acc"], d["acc_len"], d["eval_step"], d["best_acc_len"], d["best_step"]) == (
        0.55,
        2.0,
        60,
        2.1,
        40,
    )


def _out(tmp_path, n: int):
    out = tmp_path / "out"
    for i in range(n):
        shard = out / f"rows_{i // 4 * 4}-{i // 4 * 4 + 4}"
        shard.mkdir(parents=True, exist_ok=True)
        (shard / f"data_{i}.ckpt").write_bytes(b"x" * (i + 1))
    (out / "manifest.jsonl").write_text("")
    return out


def test_the_split_is_disjoint_covers_every_sample_and_depends_only_on_the_seed_and_names(tmp_path):
    out = _out(tmp_path, 10)
    root = tmp_path / "run"
    root.mkdir()
    got = split.write(str(out), str(root), 3, seed=7)
    files = split.sample_files(str(out))
    assert len(got["eval"]) == 3 and not set(got["eval"]) & set(got["train"])
    assert sorted(got["eval"] + got["train"]) == files
    assert json.load(open(root / "split.json")) == got
    for tree, names in (("features", got["train"]), ("eval", got["eval"])):
        assert split.sample_files(str(root / tree)) == names
        for n in names:  # a real folder per shard, a link per file, to the output's own file
            assert os.path.islink(root / tree / n) and not os.path.islink(os.path.dirname(root / tree / n))
            assert os.path.realpath(root / tree / n) == os.path.realpath(out / n)
    assert runspec.feature_files(str(root / "features")) == 7  # what total_steps is counted from
    assert split.choose(list(reversed(files)), 3, 7) == got["eval"]  # not the listing's order
    assert split.choose(files, 3, 8) != got["eval"]  # the seed decides
    assert split.write(str(out), str(root), 3, seed=7) == got  # the same again: the same split


def test_holding_out_every_sample_is_refused_and_writes_nothing(tmp_path):
    out = _out(tmp_path, 4)
    root = tmp_path / "run"
    root.mkdir()
    for n in (4, 9):
        with pytest.raises(
            ConfigError, match=rf"eval_samples = {n} holds out every sample .* has 4\): set it below 4"
        ):
            split.write(str(out), str(root), n, seed=0)
    assert os.listdir(root) == []
    with pytest.raises(ConfigError, match="eval_samples must not be negative"):
        _cfg(tmp_path, eval_samples=-1)


def _desc(tmp_path):
    _model(tmp_path)
    (tmp_path / "out" / "dataset.json").write_text(
        json.dumps({"aux_layer_ids": [1, 3, 4], "max_length": 256})
    )


def test_run_yaml_trains_on_the_split_and_evaluates_at_each_save(tmp_path):
    _out(tmp_path, 6)
    _desc(tmp_path)
    paths, spec = runspec.prepare(_cfg(tmp_path, eval_samples=2, save_interval=30))
    assert spec["data"]["hidden_states_path"] == paths.features == os.path.join(paths.root, "features")
    assert spec["data"]["eval_hidden_states_path"] == paths.eval and spec["training"]["eval_interval"] == 30
    assert runspec.feature_files(spec["data"]["hidden_states_path"]) == 4
    assert json.load(open(paths.yaml)) == spec
    mine = _cfg(tmp_path, eval_samples=2, run_dir="r2", specforge={"training": {"eval_interval": 7}})
    assert runspec.prepare(mine)[1]["training"]["eval_interval"] == 7  # the operator's wins
    clash = _cfg(tmp_path, eval_samples=2, run_dir="r3", specforge={"data": {"hidden_states_path": "x"}})
    with pytest.raises(ConfigError, match=r"data.hidden_states_path is hsx's to set; use \[job\] out"):
        runspec.prepare(clash)
    _, off = runspec.prepare(_cfg(tmp_path, run_dir="r4"))  # no eval: today's run, on out itself
    assert (
        off["data"]["hidden_states_path"] == str(tmp_path / "out") and "eval_interval" not in off["training"]
    )
    assert not os.path.exists(tmp_path / "r4" / "split.json")


FAKE = """import json, os, signal, sys
plan = json.load(open(sys.argv[1]))
for item in plan["do"]:
    if "say" in item:
        print(item["say"], flush=True)
    else:
        d = os.path.join(plan["output"], f"hsx-eagle3-step{item['save']}")
        os.makedirs(d)
        for name in ("training_state.pt", "training_state_rank0.pt"):
            open(os.path.join(d, name), "wb").close()
if plan["exit"] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(plan["exit"])
"""


def _launch(tmp_path, root, n: int, how: str, do: list, exit_, resume_from: int | None = None) -> dict:
    """One launch as control starts it (the record, command.json), watched by the real supervisor."""
    plan = tmp_path / f"plan{n}.json"
    plan.write_text(json.dumps({"do": do, "exit": exit_, "output": str(root / "output")}))
    (tmp_path / "fake.py").write_text(FAKE)
    cmd = {"argv": [sys.executable, str(tmp_path / "fake.py"), str(plan)], "env": {}}
    if resume_from is not None:  # as control adds it; the stand-in ignores it
        cmd["argv"].append(f"training.resume_from={root / 'output' / f'hsx-eagle3-step{resume_from}'}")
    (root / "command.json").write_text(json.dumps(cmd))
    rec = record.Record.load(str(root))
    rec.update(phase="preflight", launch=how, launches=n, features=str(tmp_path / "out"), run_dir=str(root))
    rec.write()
    p = subprocess.run([sys.executable, "-m", "runner.train.supervisor", str(root)], cwd=ROOT, timeout=60,
                       capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    return record.read(str(root))


def test_the_supervisor_fills_eval_and_timing_fields_and_keeps_a_history_across_a_crash(tmp_path):
    (tmp_path / "out").mkdir()
    root = tmp_path / "run"
    (root / "output").mkdir(parents=True)
    record.Record(str(root), {
        "total_steps": 30, "epochs": 1, "steps_per_epoch": 30, "world": 1, "output_dir": str(root / "output"),
        "run_id": "hsx-eagle3", "step": 0, "checkpoint_step": None, "log_interval": 5, "eval_samples": 3,
    }).write()  # fmt: skip
    history.reset(str(root))
    # every rank prints every line; rank 1's copy of step 5 comes after rank 0's step 10
    say = [step(5), step(10), step(5), "[rank1] warning: something", step(10), step(15), step(20), EVAL20,
           step(20), EVAL20, "step 22: {'loss': 1.0", "not a step"]  # fmt: skip
    st = _launch(
        tmp_path, root, 1, "start", [*({"say": s} for s in say), {"save": 20}, {"say": step(25)}], "kill"
    )
    assert st["phase"] == "crashed" and st["checkpoint_step"] == 20 and st["step"] == 25
    first_at = st["checkpoint_at"]
    assert dt.datetime.fromisoformat(first_at.replace("Z", "+00:00"))
    assert st["log_s"] == pytest.approx(PERF * 5)  # the trainer's own clock: 5 steps since the last line
    assert (st["val_acc"], st["acc_len"], st["eval_step"]) == (0.031746031746031744, 0.03495392866141165, 20)
    assert (st["best_acc_len"], st["best_step"]) == (0.03495392866141165, 20)
    with open(root / "history.jsonl", "ab") as f:  # what a kill -9 in the middle of a write leaves
        f.write(b'garbage\n{"kind": "step", "step": 99, "lau')
    # resumed from step 20: step 25 again (a NaN loss this time), a worse eval at 30, then done
    say = [step(25, "nan"), evaluation(30, 0.02, 0.021), step(30)]
    st = _launch(tmp_path, root, 2, "resume", [*({"say": s} for s in say), {"save": 30}], 0, resume_from=20)
    assert st["phase"] == "done" and st["checkpoint_step"] == 30 and st["checkpoint_at"] > first_at
    assert (st["val_acc"], st["acc_len"], st["eval_step"]) == (0.02, 0.021, 30)
    assert (st["best_acc_len"], st["best_step"]) == (0.03495392866141165, 20)  # the best stays
    said = render_train(TrainRecord.from_dict(st))
    assert (
        "held-out eval at step 30: val acc 2.0% · simulated accept length ~1.02 · best ~1.03 at step 20"
        in said
    )
    cfg = tmp_path / "hsx.toml"
    write_config(cfg, job={"model": "m", "dataset": "d.jsonl", "out": "out"}, train={"run_dir": root})
    p = runner("train", "history", "--json", "--config", str(cfg))
    assert p.returncode == 0, p.stdout + p.stderr
    h = json.loads(p.stdout)
    loss = 4.616308689117432
    # step 25 trained again after the resume from 20: the second launch's stands, once (issue 48)
    assert [(x["step"], x["launch"]) for x in h["points"]] == [(5, 1), (10, 1), (15, 1), (20, 1), (25, 2),
                                                               (30, 2)]  # fmt: skip
    assert h["points"][0] == {"step": 5, "loss": loss, "acc": 0.2181818187236786, "launch": 1}
    assert h["points"][4]["loss"] is None  # NaN: null
    assert h["evals"] == [
        {"step": 20, "val_acc": 0.031746031746031744, "acc_len": 0.03495392866141165, "launch": 1},
        {"step": 30, "val_acc": 0.02, "acc_len": 0.021, "launch": 2},
    ]
    assert h["marks"] == [{"step": 25, "kind": "crashed", "launch": 1}, {"step": 20, "kind": "resumed", "launch": 2},
                          {"step": 30, "kind": "done", "launch": 2}]  # fmt: skip


def test_a_launch_that_never_wrote_its_end_reads_crashed_unless_it_is_still_going(tmp_path, monkeypatch):
    w = history.Writer(str(tmp_path), 1)
    w.add("launch", 0, how="start")
    for s in (5, 10, 15):
        w.add("step", s, loss=1.0, acc=0.5)
    w.close()  # its supervisor killed: no end
    w = history.Writer(str(tmp_path), 2)
    w.add("launch", 15, how="resume")
    w.add("step", 10, loss=math.nan, acc=None)
    w.close()
    crashed = {"step": 15, "kind": "crashed", "launch": 1}
    resumed = {"step": 15, "kind": "resumed", "launch": 2}
    assert history.read(str(tmp_path), {"phase": "training", "launches": 2})["marks"] == [crashed, resumed]
    gone = history.read(str(tmp_path), {"phase": "crashed", "launches": 2})
    assert gone["marks"] == [crashed, resumed, {"step": 10, "kind": "crashed", "launch": 2}]
    monkeypatch.setattr(history, "CAP", 2)
    assert [p["step"] for p in history.read(str(tmp_path), {})["points"]] == [15, 10]  # the last ones
    assert history.read(str(tmp_path / "none"), {}) == {"points": [], "evals": [], "marks": []}
    with open(tmp_path / history.NAME, "a") as f:  # a launch whose first line was lost: its steps say it ran
        f.write('{"kind": "step", "step": 20, "launch": 3, "loss": 1.0, "acc": 0.5}\n')
    assert history.read(str(tmp_path), {"phase": "crashed"})["marks"][-1] == {
        "step": 20,
        "kind": "crashed",
        "launch": 3,
    }


NOW = dt.datetime(2026, 12, 1, 12, 10, tzinfo=dt.timezone.utc)
BASE = {"phase": "training", "step": 50, "total_steps": 100, "run_id": "hsx-eagle3", "launches": 1,
        "checkpoint_step": 40, "checkpoint_at": "2026-12-01T12:05:00.000Z"}  # fmt: skip


def test_progress_says_val_acc_and_acceptance_length_with_the_best_and_the_checkpoints_age():
    rec = TrainRecord.from_dict({**BASE, "eval_samples": 30, "val_acc": 0.52, "acc_len": 1.9, "eval_step": 50,
                                 "best_acc_len": 2.1, "best_step": 40, "log_s": 3.5, "log_interval": 10})  # fmt: skip
    text = render_train(rec, now=NOW)
    assert (
        "held-out eval at step 50: val acc 52.0% · simulated accept length ~2.90 · best ~3.10 at step 40"
        in text
    )
    assert "last durable checkpoint: step 40 (5m00s ago)" in text
    waiting = render_train(TrainRecord.from_dict({**BASE, "eval_samples": 30}), now=NOW)
    assert "eval on 30 held-out samples: none yet" in waiting
    plain = render_train(TrainRecord.from_dict({**BASE, "eval_samples": 0}), now=NOW)
    assert "eval" not in plain and "val acc" not in plain
    odd = TrainRecord.from_dict({**BASE, "acc_len": "nan", "val_acc": 0.5})  # a NaN eval is not a NaN loss
    assert not odd.nan_loss and "held-out eval: val acc 50.0%\n" in render_train(odd, now=NOW)
