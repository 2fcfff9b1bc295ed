"""What an operator's keys and paths cannot cost: [train.specforge] keys hsx owns, run dirs and
export dirs hsx did not make, files root would run or unpickle from others' folders, and two
launches at once (real files, real supervisor and trainer processes)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest

from runner.contract.status import Phase, StatusRecord, write_record
from runner.job import rundir
from runner.procs import cmdline, pids
from runner.train import control, exporter, guard, preflight, record, runspec, split, strays
from tests.runner.helpers import wait_for
from tests.runner.train.units import _cfg, _ckpt, _fake_python, _model


def _extracted(tmp_path):
    """A done extraction with one feature file and its description."""
    _model(tmp_path)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    write_record(str(out / "status.json"), StatusRecord(job="t", phase=Phase.DONE))
    (out / "dataset.json").write_text(json.dumps({"aux_layer_ids": [1, 3, 4], "max_length": 256}))
    (out / "rows_0").mkdir(exist_ok=True)
    (out / "rows_0" / "data_0.ckpt").write_bytes(b"x")


def _nested(path: tuple[str, ...], value) -> dict:
    d = value
    for k in reversed(path):
        d = {k: d}
    return d


@pytest.mark.parametrize("path", list(guard.OWNED), ids=".".join)
def test_each_specforge_key_hsx_owns_is_refused_at_start_with_nothing_written(tmp_path, path):
    _extracted(tmp_path)
    cfg = _cfg(tmp_path, python=sys.executable, specforge=_nested(path, 7))
    rep = control.start(cfg)
    assert rep.code == 3 and f"[train.specforge] {'.'.join(path)} is hsx's to set; use " in rep.text
    assert guard.OWNED[path] in rep.text and not os.path.exists(runspec.run_dir(cfg))


@pytest.mark.parametrize("over", [{"training.save_interval": 0}, {"training": {"optimizer.lr": 1}}])
def test_a_dotted_key_is_refused_with_the_table_to_write_instead(tmp_path, over):
    _extracted(tmp_path)
    rep = control.start(_cfg(tmp_path, python=sys.executable, specforge=over))
    assert rep.code == 3 and "a dotted key; write it as a table" in rep.text, rep.text
    assert not os.path.exists(runspec.run_dir(_cfg(tmp_path)))


def test_a_harmless_key_reaches_run_yaml_and_a_table_stays_a_table(tmp_path):
    _extracted(tmp_path)
    cfg = _cfg(tmp_path, specforge={"training": {"ttt_length": 3}, "tracking": {"log_every": 5}})
    _, spec = runspec.prepare(cfg)
    assert json.load(open(runspec.RunPaths(runspec.run_dir(cfg)).yaml))["training"]["ttt_length"] == 3
    assert spec["training"]["save_interval"] == cfg.train.save_interval
    with pytest.raises(Exception, match=r"\[train.specforge\] training must be a table"):
        runspec.plan(_cfg(tmp_path, specforge={"training": 3}))


def test_a_run_dir_holding_someones_eval_is_refused_and_their_file_kept(tmp_path):
    _extracted(tmp_path)
    theirs = tmp_path / "data"
    (theirs / "eval").mkdir(parents=True)
    (theirs / "eval" / "notes.txt").write_text("ours")
    cfg = _cfg(tmp_path, python=sys.executable, run_dir=str(theirs), eval_samples=1)
    rep = control.start(cfg)
    assert rep.code == 3 and "holds files hsx did not write (no .hsx-run)" in rep.text
    assert (theirs / "eval" / "notes.txt").read_text() == "ours" and sorted(os.listdir(theirs)) == ["eval"]


def test_only_hsxs_own_link_trees_are_replaced_in_its_own_run_dir(tmp_path):
    _extracted(tmp_path)
    (tmp_path / "out" / "rows_0" / "data_1.ckpt").write_bytes(b"y")
    root = tmp_path / "run"
    root.mkdir()
    split.write(str(tmp_path / "out"), str(root), 1, 0)  # hsx's trees: replaced at will
    split.write(str(tmp_path / "out"), str(root), 1, 0)
    (root / "eval" / "mine.txt").write_text("kept")
    with pytest.raises(Exception, match="holds files hsx did not link there"):
        split.write(str(tmp_path / "out"), str(root), 1, 0)
    assert (root / "eval" / "mine.txt").read_text() == "kept"


def test_run_dirs_inside_the_jobs_folders_or_linked_are_refused(tmp_path):
    _extracted(tmp_path)
    for where, said in ((tmp_path / "out" / "train", "is inside [job] out"),
                        (tmp_path / "model" / "run", "is inside [job] model")):  # fmt: skip
        rep = control.start(_cfg(tmp_path, python=sys.executable, run_dir=str(where)))
        assert rep.code == 3 and said in rep.text and not where.exists()
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    rep = control.start(_cfg(tmp_path, python=sys.executable, run_dir=str(tmp_path / "link")))
    assert rep.code == 3 and "is a symlink" in rep.text and os.listdir(tmp_path / "real") == []


def test_an_export_dir_naming_the_models_folder_or_someones_files_is_refused(tmp_path):
    _extracted(tmp_path)
    before = sorted(os.listdir(tmp_path / "model"))
    cfg = _cfg(tmp_path, python=sys.executable, export_dir=str(tmp_path / "model"))
    root = runspec.run_dir(cfg)
    rundir.claim(cfg, "train")
    _ckpt(tmp_path / "out-train" / "output", 4, ["training_state.pt", "training_state_rank0.pt"])
    record.Record(
        root, {"phase": "done", "run_id": "hsx-eagle3", "output_dir": f"{root}/output", "world": 1}
    ).write()
    rep = exporter.export(cfg)
    assert (
        rep.code == 3
        and "is inside [job] model" in rep.text
        and sorted(os.listdir(tmp_path / "model")) == before
    )
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text("{}")
    rep = exporter.export(_cfg(tmp_path, python=sys.executable, export_dir=str(tmp_path / "mine")))
    assert rep.code == 3 and "holds files hsx did not export" in rep.text
    assert (tmp_path / "mine" / "config.json").read_text() == "{}"


def test_what_root_runs_must_be_its_own_and_writable_by_no_one_else(tmp_path):
    tool = tmp_path / "venv" / "bin"
    tool.mkdir(parents=True)
    (tool / "python").write_text("")
    assert guard.trusted(str(tool / "python"), "[train] python") is None
    os.chmod(tmp_path / "venv", 0o777)
    why = guard.trusted(str(tool / "python"), "[train] python")
    assert why and "others may write" in why and str(tmp_path / "venv") in why
    os.chmod(tmp_path / "venv", 0o775)
    os.chown(tmp_path / "venv", 0, 65534)  # a group of other users may write it
    assert "others may write" in guard.trusted(str(tool / "python"), "[train] python")
    os.chown(tmp_path / "venv", 0, 0)  # root's group: root alone
    assert guard.trusted(str(tool / "python"), "[train] python") is None
    os.chmod(tmp_path / "venv", 0o755)
    os.chown(tool / "python", 65534, 65534)
    assert "belongs to uid 65534" in guard.trusted(str(tool / "python"), "[train] python")
    sticky = tmp_path / "shared"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # as /tmp: others cannot replace what is not theirs
    assert guard.trusted(str(sticky), "[train] run_dir") is None


TRAINER = """import argparse, time
def main(argv=None):
    p = argparse.ArgumentParser(prog="specforge")
    p.add_subparsers(dest="command").add_parser("train").add_argument("-c")
    p.parse_known_args(argv)  # --help ends here, as the interpreter check asks
    print("step 1: {'loss': 1.0}", flush=True)
    time.sleep(300)
if __name__ == "__main__":
    main()
"""


def _trainers(root) -> list[int]:
    yaml = os.path.join(root, "run.yaml")
    return [p for p in pids() if {yaml, "specforge.cli"} <= set(cmdline(p))]


def test_two_resumes_at_once_launch_one_trainer_and_never_kill_the_winners(tmp_path, monkeypatch):
    """20 rounds of two resumes at the same moment: one launches, the other is refused, and the
    winner's trainer lives (the loser's stray-killing happens only under the launch lock)."""
    monkeypatch.setattr(preflight, "checks", lambda cfg, spec, draft=None: [])  # not what is raced here
    _extracted(tmp_path)
    py = _fake_python(tmp_path, "sf", "0.2.0", TRAINER)
    cfg = _cfg(tmp_path, python=py, export_at_end=False)
    root = runspec.run_dir(cfg)
    os.makedirs(root)
    rundir.claim(cfg, "train")
    paths = runspec.RunPaths(root)
    open(paths.yaml, "w").write(json.dumps({k: {} for k in ("model", "data", "training", "deployment")}))
    _ckpt(tmp_path / "out-train" / "output", 4, ["training_state.pt", "training_state_rank0.pt"])
    real, entered = strays.end, []

    def end(root):  # a second resume that gets this far ends strays only once the first's trainer is up
        entered.append(root)
        deadline = time.monotonic() + 20
        while len(entered) > 1 and not _trainers(root) and time.monotonic() < deadline:
            time.sleep(0.05)
        return real(root)

    monkeypatch.setattr(strays, "end", end)
    for _ in range(20):
        record.Record(
            root, {"phase": "crashed", "run_id": "hsx-eagle3", "output_dir": paths.output, "world": 1}
        ).write()
        gate, got = threading.Barrier(2), []
        entered.clear()

        def resume(gate=gate, got=got):
            gate.wait()
            got.append(control.resume(cfg))

        threads = [threading.Thread(target=resume) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(r.code for r in got) == [0, 3], [r.text for r in got]
        winner = next(r for r in got if r.code == 0).obj
        wait_for(
            lambda: _trainers(root) == [record.read(root)["pid"]] and record.read(root)["step"] == 1,
            20, what="the winner's trainer alone, at step 1",
        )  # fmt: skip
        assert control.running(paths) == winner["supervisor_pid"]
        assert control.stop(cfg, 20).obj["done"]
        assert not _trainers(root)


def test_an_interpreter_others_may_write_is_refused_before_root_runs_it(tmp_path, monkeypatch):
    _extracted(tmp_path)
    venv = tmp_path / "shared-venv" / "bin"
    venv.mkdir(parents=True)
    ran = tmp_path / "ran"
    py = venv / "python"
    py.write_text(f'#!/bin/sh\ntouch {ran}\nexec {sys.executable} "$@"\n')
    py.chmod(0o755)
    os.chmod(tmp_path / "shared-venv", 0o777)  # anyone may replace what root would run
    ok = {"name": "features", "ok": True, "detail": "", "fix": ""}
    monkeypatch.setattr(preflight, "features", lambda out: ok)  # the features' verdict is not checked here
    rep = control.start(_cfg(tmp_path, python=str(py)))
    assert rep.code == 3 and "others may write" in rep.text and str(tmp_path / "shared-venv") in rep.text
    assert not ran.exists()  # never run, not even to ask its version
