"""verify and adopt in this process (hsx-runner's own main, the adopt module), on outputs the
in-process extractor wrote through the fake dump server: no runner or server process. The
same stories against real runs: tests/runner/job/test_job.py and output/test_adopt.py."""

from __future__ import annotations

import json
import os
import shutil

from runner.contract.config import load
from runner.output import verified
from runner.output.adopt import adopt
from runner.output.store import sample_path
from tests.conftest import write_job
from tests.runner.helpers import extract_in_process, runner_json, unrecorded_ckpts, verify

N = 6


def _job(dest, demo_assets, **overrides) -> str:
    """A job on the demo model over N pre-tokenized rows (no tokenizer needed)."""
    rows = [
        json.dumps({"input_ids": [5 + i, 6, 7, 8 + i], "loss_mask": [0, 1, 1, 1]}) + "\n" for i in range(N)
    ]
    return write_job(dest, demo_assets, rows=rows, **overrides)


def test_verify_finds_a_corrupt_sample_and_repair_quarantines_it(tmp_path, demo_assets, dump_server):
    conf = _job(tmp_path / "job", demo_assets)
    _, store, err = extract_in_process(load(conf), dump_server)
    assert err is None and sorted(store.manifest()) == list(range(N))
    assert not verified.check(store.out)[0]  # never verified
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == N and rep["complete"] and rep["corrupt"] == rep["missing"] == []
    assert verified.check(store.out)[0]  # kept: the training preflight takes it

    victim = sample_path(store.out, 2)
    with open(victim, "r+b") as f:  # flip bytes inside the tensor data
        f.seek(os.path.getsize(victim) // 2)
        b = f.read(8)
        f.seek(-8, os.SEEK_CUR)
        f.write(bytes(x ^ 0xFF for x in b))
    ok, detail, _ = verified.check(store.out)  # the same files, one rewritten in place since
    assert not ok and f"the same {N} feature files, but sizes, times or the manifest changed" in detail
    code, rep = verify(conf, "--quick")
    assert code == 0 and rep["ok"] == N  # --quick checks sizes and shapes, not checksums or values
    assert "was --quick" in verified.check(store.out)[1]  # and so does not make them fit to train
    code, rep = verify(conf)
    assert code == 1 and rep["corrupt"] == [2] and rep["reasons"]["2"] == "checksum differs from the manifest"
    assert f"found {N - 1} / {N} sound (1 corrupt)" in verified.check(store.out)[1]
    code, rep = verify(conf, "--repair")
    assert rep["repaired"] == [2]
    assert os.listdir(os.path.join(store.out, ".quarantine")) == ["rows_0-2000_data_2.ckpt.bad"]
    assert store.plan(N).remaining == [2] and unrecorded_ckpts(store.out) == []


def test_adopt_takes_the_sound_files_and_leaves_a_truncated_one(tmp_path, demo_assets, dump_server):
    done = _job(tmp_path / "earlier", demo_assets)
    _, earlier, err = extract_in_process(load(done), dump_server)
    assert err is None
    foreign = tmp_path / "old-script-output"
    for i in (0, 1, 3, 4, 5):  # 2 never written
        dest = foreign / "rows_0-2000" / f"data_{i}.ckpt"
        os.makedirs(dest.parent, exist_ok=True)
        shutil.copyfile(sample_path(earlier.out, i), dest)
    torn = foreign / "rows_0-2000" / "data_4.ckpt"
    os.truncate(torn, os.path.getsize(torn) // 2)

    conf = _job(tmp_path / "job", demo_assets, job__adopt_roots=[str(tmp_path)])
    cfg = load(conf)
    rep = adopt(cfg, str(foreign))
    assert rep["adopted"] == 4 and rep["adopted_idx"] == [0, 1, 3, 5] and rep["missing"] == [2]
    assert list(rep["bad"]) == ["4"] and rep["bad"]["4"].startswith("does not load"), rep["bad"]
    assert [x["path"] for x in rep["left"]] == [str(torn)] and os.path.exists(torn)  # not the job's tree
    assert not os.path.exists(os.path.join(cfg.job.out, ".quarantine"))
    with open(os.path.join(cfg.job.out, "dataset.json")) as f:  # what a run writes, from the model
        desc = json.load(f)
    assert desc["total"] == N and desc["hidden_size"] == 64 and desc["aux_layer_ids"] == [1, 3, 4]
    code, v = verify(conf)
    assert code == 1 and v["ok"] == 4 and v["missing"] == [2, 4] and v["corrupt"] == []
    code, st = runner_json("status", conf)
    assert code == 0 and st["adopted"] == 4 and st["done"] == 4 and st["total"] == N and not st["alive"]


def test_a_second_repair_never_overwrites_an_earlier_quarantined_file(tmp_path, demo_assets, dump_server):
    conf = _job(tmp_path / "job", demo_assets)
    cfg = load(conf)
    qdir = os.path.join(cfg.job.out, ".quarantine")
    kept = []
    for n in range(3):  # the same sample goes bad three times: each bad copy is kept
        _, store, err = extract_in_process(cfg, dump_server)
        assert err is None and store.plan(N).remaining == []
        victim = sample_path(store.out, 2)
        with open(victim, "r+b") as f:
            f.seek(os.path.getsize(victim) // 2)
            f.write(f"bad copy {n}".encode())
        with open(victim, "rb") as f:
            kept.append(f.read())
        code, rep = verify(conf, "--repair")
        assert code == 1 and rep["repaired"] == [2], rep
    names = sorted(os.listdir(qdir))
    assert len(names) == 3 and all(x.endswith(".bad") for x in names), names  # SpecForge skips them
    held = []
    for x in names:
        with open(os.path.join(qdir, x), "rb") as f:
            held.append(f.read())
    assert sorted(held) == sorted(kept)
