"""`hsx-runner adopt DIR`: another tool's output (SpecForge layout from a plain torch.save, or
loose .pt files) is checked file by file, the sound ones recorded and moved into place, the bad
ones quarantined; the job then extracts only the rest, and ends equal to an uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import BIN, runner
from tests.runner.helpers import (
    assert_same_tensors,
    out_dir,
    status,
    tensors,
    unrecorded_ckpts,
    verify,
)
from tests.runner.output.conftest import N, save


def adopt(conf: str, d: str) -> tuple[int, dict]:
    p = runner("adopt", "--json", "--config", conf, str(d))
    return p.returncode, json.loads(p.stdout)


def manifest(out: str) -> list[dict]:
    with open(os.path.join(out, "manifest.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def quarantine(out: str) -> list[str]:
    try:
        return sorted(os.listdir(os.path.join(out, ".quarantine")))
    except FileNotFoundError:
        return []


@pytest.mark.slow
def test_adopt_specforge_layout_then_the_job_extracts_only_the_rest(reference, job, tmp_path):
    import torch

    _, truth = reference
    foreign = tmp_path / "old-script-output"
    missing, truncated, tokens, nonfinite = [1, 5, 9], 2, 4, 7
    for i, t in truth.items():
        if i in missing:
            continue
        t = {k: v.clone() for k, v in t.items()}
        if i == tokens:
            t["input_ids"][3] = (t["input_ids"][3] + 1) % 100
        if i == nonfinite:
            t["hidden_state"][0, 2, 5] = float("nan")
        save(str(foreign / "rows_0-2000" / f"data_{i}.ckpt"), t)
    path = foreign / "rows_0-2000" / f"data_{truncated}.ckpt"
    os.truncate(path, os.path.getsize(path) // 2)
    save(str(foreign / "rows_0-2000" / f"data_{N + 3}.ckpt"), truth[0])  # outside the dataset

    conf = job(samples=N, job__adopt_roots=[str(tmp_path)])
    out = out_dir(conf)
    code, rep = adopt(conf, foreign)
    assert code == 0, rep
    assert rep["adopted"] == N - 6 and sorted(rep["adopted_idx"]) == [0, 3, 6, 8, 10, 11]
    assert sorted(rep["bad"]) == [str(truncated), str(tokens), str(nonfinite)]
    assert "load" in rep["bad"][str(truncated)]
    assert "tokens" in rep["bad"][str(tokens)]
    assert "finite" in rep["bad"][str(nonfinite)]
    assert rep["stray"] == [N + 3] and rep["missing"] == missing and rep["already"] == []
    # the good files moved; every bad or stray one is reported and left where it was (not our tree)
    left = sorted(os.path.basename(x["path"]) for x in rep["left"])
    assert left == sorted(f"data_{i}.ckpt" for i in (truncated, tokens, nonfinite, N + 3)), rep["left"]
    assert sorted(os.listdir(foreign / "rows_0-2000")) == left and quarantine(out) == []
    assert unrecorded_ckpts(out) == []
    lines = manifest(out)
    assert sorted(r["idx"] for r in lines) == rep["adopted_idx"] and all(r["adopted"] for r in lines)
    st = status(conf)
    assert st["adopted"] == 6 and st["done"] == 6 and st["total"] == N and st["phase"] == "stopped"
    assert "adopted 6" in st["reason"]

    runner("run", "--config", conf, check=True)
    st = status(conf)
    assert st["phase"] == "done" and st["done"] == N and st["adopted"] == 6
    assert st["done_this_run"] == 6  # this run extracted only the missing and the bad ones
    assert_same_tensors(tensors(conf), truth)
    code, v = verify(conf)
    assert code == 0 and v["complete"] and v["ok"] == N
    assert unrecorded_ckpts(out) == []
    assert len(os.listdir(foreign / "rows_0-2000")) == 4  # nothing deleted
    bad = torch.load(foreign / "rows_0-2000" / f"data_{nonfinite}.ckpt")
    assert torch.isnan(bad["hidden_state"]).any()
    text = runner("status", "--config", conf, check=True).stdout
    assert "6 adopted" in text


@pytest.mark.slow
def test_adopt_loose_pt_files(reference, job, tmp_path):
    _, truth = reference
    foreign = tmp_path / "loose"
    save(str(foreign / "data_0.pt"), truth[0])
    save(str(foreign / "3.pt"), truth[3])
    save(str(foreign / "sub" / "sample_6.ckpt"), truth[6])
    save(str(foreign / "notes.pt"), truth[7])  # no index in the name: listed, left alone
    conf = job(samples=N, job__adopt_roots=[str(tmp_path)])
    out = out_dir(conf)
    code, rep = adopt(conf, foreign)
    assert code == 0 and rep["adopted"] == 3 and rep["bad"] == {} and rep["stray"] == []
    assert rep["missing"] == [i for i in range(N) if i not in (0, 3, 6)]
    assert rep["unindexed"] == [str(foreign / "notes.pt")] and os.path.exists(foreign / "notes.pt")
    assert sorted(os.listdir(foreign)) == ["notes.pt", "sub"]
    assert_same_tensors(tensors(conf), {i: truth[i] for i in (0, 3, 6)})
    _, v = verify(conf)
    assert v["ok"] == 3 and v["corrupt"] == [] and v["unrecorded"] == []
    assert unrecorded_ckpts(out) == []
    # a second adopt of the same (now empty) directory changes nothing; this time from the ops
    # side (`hsx adopt`: remote client, handlers, audit) to the real runner
    p = subprocess.run([os.path.join(BIN, "hsx"), "adopt", "--config", conf, str(foreign)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"adopt {foreign}: 0 adopted · 0 bad · 0 stray")
    with open(os.path.join(os.path.dirname(conf), "hsx-audit.jsonl")) as f:
        attempt, entry = [json.loads(line) for line in f]
    assert attempt["result"] == "attempt" and attempt["id"] == entry["id"]
    assert entry["user"] == "terminal" and entry["action"] == f"adopt {foreign}" and entry["result"] == "ok"
    assert status(conf)["adopted"] == 3 and len(manifest(out)) == 3


@pytest.mark.slow
def test_adopt_in_place(reference, job):
    """Files already in the job's out (another tool wrote there) but with no manifest line."""
    _, truth = reference
    conf = job(samples=N)
    out = out_dir(conf)
    for i, t in truth.items():
        if i in (2, 4):
            continue
        name = f"data_{i}.pt" if i == 5 else f"data_{i}.ckpt"  # one under another name
        save(os.path.join(out, "rows_0-2000", name), t)
    bad = {k: v.clone() for k, v in truth[4].items()}
    bad["hidden_state"], bad["aux_hidden_state"] = (
        bad["hidden_state"].float(),
        bad["aux_hidden_state"].float(),
    )
    save(os.path.join(out, "rows_0-2000", "data_4.ckpt"), bad)
    assert len(unrecorded_ckpts(out)) == N - 2  # what SpecForge would read before adopt
    code, rep = adopt(conf, out)
    assert code == 0 and rep["in_place"] and rep["adopted"] == N - 2, rep
    assert list(rep["bad"]) == ["4"] and "dtype" in rep["bad"]["4"] and rep["missing"] == [2]
    assert unrecorded_ckpts(out) == [] and quarantine(out) == ["adopt_rows_0-2000_data_4.ckpt.bad"]
    assert os.path.exists(os.path.join(out, "rows_0-2000", "data_5.ckpt"))
    runner("run", "--config", conf, check=True)
    st = status(conf)
    assert st["done"] == N and st["adopted"] == N - 2 and st["done_this_run"] == 2
    assert_same_tensors(tensors(conf), truth)
    assert verify(conf)[0] == 0 and unrecorded_ckpts(out) == []


def test_adopt_refuses_a_held_job_and_a_bad_dir(job, tmp_path):
    from runner.output.lock import JobLock
    from runner.output.ranks import RunPaths

    conf = job(samples=4, job__adopt_roots=[str(tmp_path)])
    out = out_dir(conf)
    d = tmp_path / "empty"
    d.mkdir()
    lock = JobLock(RunPaths(out).lock)
    lock.acquire()  # a runner holds the job
    try:
        p = runner("adopt", "--json", "--config", conf, str(d))
        rep = json.loads(p.stdout)
        assert p.returncode == 3 and rep["ok"] is False and rep["refused"]
        assert str(os.getpid()) in rep["reason"] and "stop it first" in rep["reason"]
        p = runner("adopt", "--config", conf, str(d))
        assert p.returncode == 3 and "refused" in p.stderr and p.stdout == ""
    finally:
        lock.release()
    p = runner("adopt", "--json", "--config", conf, str(tmp_path / "nope"))
    assert p.returncode == 3 and "does not exist" in json.loads(p.stdout)["reason"]
    p = runner("adopt", "--json", "--config", conf, os.path.dirname(out))  # holds out itself
    assert p.returncode == 3 and "holds the job's output" in json.loads(p.stdout)["reason"]
    assert not os.path.exists(os.path.join(out, "manifest.jsonl"))


def test_rate_and_eta_count_only_extracted_samples(tmp_path):
    """Adopted samples are part of done, never of the rate (the window holds only extractions)."""
    import time

    from runner.job.record import Recorder
    from runner.output.ranks import RunPaths
    from runner.output.store import Store

    out = str(tmp_path / "out")
    store = Store(out)
    store.prepare()
    for i in range(6):
        store.append_manifest(i, 10, 100, "x", "rows_0-2000", adopted=True)
    store.append_manifest(6, 10, 100, "x", "rows_0-2000")
    rec = Recorder(RunPaths(out), "t", 20, 60.0)
    rec.set_done(7, 0, 100.0)
    rec.write()
    r = rec.record
    assert r.adopted == 6 and r.done == 7 and r.rate is None and r.eta_s is None
    before = time.monotonic()
    rec.extracted(10, 100)
    after = time.monotonic()
    for _ in range(2):
        time.sleep(0.05)
        rec.extracted(10, 100)
    written = time.monotonic()
    rec.write()
    end = time.monotonic()
    assert r.done == 10 and r.done_this_run == 3 and r.adopted == 6
    # the three extractions' two intervals (no adopted sample among them) over the span from the
    # first to the write, as the record's own clock read it between these bounds
    assert 2 / (end - before) <= r.rate <= 2 / (written - after)
    assert r.eta_s == pytest.approx((20 - 10) / r.rate)


@pytest.mark.slow
def test_adopt_across_filesystems_copies_records_then_removes_the_source(
    reference, job, tmp_path, monkeypatch
):
    """Where a rename cannot reach the output, the file is copied under a temp name beside it,
    recorded, renamed into place, and only then is the source removed."""
    from runner.contract.config import load
    from runner.output import adopt as adopt_mod

    _, truth = reference
    foreign = tmp_path / "other-fs"
    for i in (1, 2):
        save(str(foreign / f"data_{i}.pt"), truth[i])
    conf = job(samples=N, job__adopt_roots=[str(tmp_path)])
    out = out_dir(conf)
    monkeypatch.setattr(
        adopt_mod._Adopter, "_commit_rename", lambda self, idx, p, seq, storage: False
    )  # EXDEV
    rep = adopt_mod.adopt(load(conf), str(foreign))
    assert rep["adopted"] == 2 and rep["bad"] == {} and os.listdir(foreign) == []
    assert os.listdir(os.path.join(out, ".tmp")) == [] and unrecorded_ckpts(out) == []
    assert_same_tensors(tensors(conf), {i: truth[i] for i in (1, 2)})
    assert [r["idx"] for r in manifest(out)] == [1, 2]


@pytest.mark.slow
def test_adopt_in_the_background_posts_its_report_through_the_status_record(reference, job, tmp_path):
    """`/extract adopt` runs detached (an SSH call cannot wait on terabytes); a held job is
    refused at once, before anything is spawned."""
    from runner.contract.status import StatusRecord
    from runner.output.lock import JobLock
    from runner.output.ranks import RunPaths
    from runner.text.extraction import background_result
    from tests.runner.helpers import wait_for

    _, truth = reference
    foreign = tmp_path / "bg"
    for i in (1, 2, 5):
        save(str(foreign / "rows_0-2000" / f"data_{i}.ckpt"), truth[i])
    conf = job(samples=N, job__adopt_roots=[str(tmp_path)])
    out = out_dir(conf)
    lock = JobLock(RunPaths(out).lock)
    lock.acquire()
    try:
        p = runner("adopt", "--json", "--background", "--config", conf, str(foreign))
        assert p.returncode == 3 and "stop it first" in json.loads(p.stdout)["reason"]
        assert "background" not in status(conf)
    finally:
        lock.release()
    p = runner("adopt", "--json", "--background", "--config", conf, str(foreign))
    rep = json.loads(p.stdout)
    assert p.returncode == 0 and rep["started"] and rep["background"], rep
    bg = wait_for(lambda: (b := status(conf).get("background") or {}).get("state") == "done" and b, timeout=120,
                  what="adopt done")  # fmt: skip
    assert bg["verb"] == "adopt" and bg["total"] == 3 and bg["result"]["adopted"] == 3, bg
    text = background_result(StatusRecord.from_dict(status(conf)))
    assert text.startswith(f"adopt finished: adopt {foreign}: 3 adopted · 0 bad"), text
    assert status(conf)["adopted"] == 3 and unrecorded_ckpts(out) == []


@pytest.mark.slow
def test_adopt_specforge_compressed_layout_keeps_each_files_encoding(reference, job, tmp_path):
    """SpecForge's ``--compress`` writes ``data_{idx}.ckpt.gz`` (gzip of the torch.save bytes):
    adopted under that name; a file named .gz that is a plain save is named by what it holds."""
    import gzip
    import io

    import torch

    _, truth = reference
    foreign = tmp_path / "compressed" / "rows_0-2000"
    foreign.mkdir(parents=True)
    for i in range(6):
        buf = io.BytesIO()
        torch.save({k: truth[i][k] for k in truth[i]}, buf)
        (foreign / f"data_{i}.ckpt.gz").write_bytes(gzip.compress(buf.getvalue()))
    save(str(foreign / "data_6.ckpt.gz"), truth[6])  # not gzip at all, whatever its name says
    conf = job(samples=N, job__adopt_roots=[str(tmp_path)])
    out = out_dir(conf)
    code, rep = adopt(conf, tmp_path / "compressed")
    assert code == 0 and rep["adopted"] == 7 and rep["bad"] == {}, rep
    names = sorted(os.listdir(os.path.join(out, "rows_0-2000")))
    assert names == [f"data_{i}.ckpt.gz" for i in range(6)] + ["data_6.ckpt"]
    assert unrecorded_ckpts(out) == []
    runner("run", "--config", conf, check=True)
    assert_same_tensors(tensors(conf), truth)
    code, v = verify(conf)
    assert code == 0 and v["complete"]
