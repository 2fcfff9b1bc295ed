"""[job] storage = "ckpt.gz" end to end on the reference backend: the files are gzip of the
same torch.save bytes under ``data_{idx}.ckpt.gz``; a kill -9, a resume, an operator switching
the mode mid-job and verify all keep every sample exactly once under one name SpecForge reads,
with tensors equal to an uninterrupted raw run's."""

from __future__ import annotations

import json
import os
import signal

import pytest

from runner.data.demo_assets import PACE_ENV
from runner.output.store import Store, sample_path
from tests.conftest import runner
from tests.runner.helpers import (
    assert_same_tensors,
    discovered,
    done_count,
    kill_group,
    out_dir,
    start_run,
    tensors,
    unrecorded_ckpts,
    verify,
    wait_for,
)

N = 30


def kinds(out: str) -> set[str]:
    return {"ckpt.gz" if p.endswith(".gz") else "ckpt" for ps in discovered(out).values() for p in ps}


@pytest.fixture(scope="module")
def raw_truth(tmp_path_factory, demo_assets):
    from tests.conftest import write_job

    conf = write_job(tmp_path_factory.mktemp("raw"), demo_assets, N)
    runner("run", "--config", conf, check=True)
    return tensors(conf), sum(os.path.getsize(sample_path(out_dir(conf), i)) for i in range(N))


@pytest.mark.slow
def test_ckpt_gz_through_kill_nine_and_resume_equals_a_raw_run(job, raw_truth):
    truth, raw_bytes = raw_truth
    conf = job(samples=N, job__storage="ckpt.gz")
    out = out_dir(conf)
    p = start_run(conf)
    try:
        wait_for(lambda: done_count(conf) >= 8, what="8 samples")
        kill_group(p.pid)  # the runner and its server, mid-run
        p.wait(30)
    finally:
        kill_group(p.pid)
    assert 0 < done_count(conf) < N and all(len(v) == 1 for v in discovered(out).values())
    runner("run", "--config", conf, check=True)
    assert kinds(out) == {"ckpt.gz"} and sorted(discovered(out)) == list(range(N))
    with open(os.path.join(out, "manifest.jsonl")) as f:
        assert {json.loads(line).get("storage") for line in f} == {"ckpt.gz"}
    assert unrecorded_ckpts(out) == []
    with open(os.path.join(out, "dataset.json")) as f:
        assert json.load(f)["storage"] == "ckpt.gz"
    for quick in ((), ("--quick",)):
        code, rep = verify(conf, *quick)
        assert code == 0 and rep["complete"] and rep["ok"] == N, rep
    assert_same_tensors(tensors(conf), truth)
    assert sum(os.path.getsize(sample_path(out, i, "ckpt.gz")) for i in range(N)) < raw_bytes


@pytest.mark.slow
def test_switching_the_mode_mid_job_keeps_one_name_per_sample(job, raw_truth):
    raw_truth = raw_truth[0]
    conf = job(samples=N)
    out = out_dir(conf)
    # paced: 1 s a request, 4 at a time, so the stop lands mid-job however busy the machine (at
    # full speed a busy run finished all N between the 8th sample and the SIGTERM)
    p = start_run(conf, **{PACE_ENV: "1.0"})
    wait_for(lambda: done_count(conf) >= 8, what="8 raw samples")
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 0
    first = set(discovered(out))
    assert kinds(out) == {"ckpt"} and 0 < len(first) < N
    with open(conf) as f:
        text = f.read()
    with open(conf, "w") as f:  # the operator switches to gzip and resumes
        f.write(text.replace("[job]\n", '[job]\nstorage = "ckpt.gz"\n', 1))
    runner("run", "--config", conf, check=True)
    found = discovered(out)
    assert sorted(found) == list(range(N)) and all(len(v) == 1 for v in found.values())
    assert {i for i, (path,) in found.items() if path.endswith(".ckpt")} == first  # kept as written
    assert kinds(out) == {"ckpt", "ckpt.gz"}
    with open(os.path.join(out, "dataset.json")) as f:
        assert json.load(f)["storage"] == "ckpt.gz"  # the mode now; the files say theirs
    code, rep = verify(conf)
    assert code == 0 and rep["complete"], rep
    assert_same_tensors(tensors(conf), raw_truth)
    # a sample written again in the other mode replaces its file: never two names for one sample
    idx = min(first)
    store = Store(out, storage="ckpt.gz")
    tmp = os.path.join(store.tmp, "again.dump")
    from runner.codec.ckpt import write_sample

    nbytes, checksum = write_sample(tmp, **{k: raw_truth[idx][k] for k in raw_truth[idx]}, compress=True)
    store.commit(idx, tmp, int(raw_truth[idx]["input_ids"].shape[0]), nbytes, checksum)
    assert discovered(out)[idx] == [sample_path(out, idx, "ckpt.gz")]
    assert verify(conf)[0] == 0


@pytest.mark.slow
def test_fewer_mantissa_bits_round_the_states_and_pin_the_output(job, raw_truth):
    """[job] mantissa_bits = 4 (with ckpt.gz): every hidden state is the exact bf16 value rounded
    to nearest even to 4 mantissa bits; verify checks it; a run asking for other bits is refused."""
    import torch

    from runner.codec.ckpt import check_tensors
    from runner.codec.precision import relative_error, round_mantissa

    truth, _ = raw_truth
    n = 12
    conf = job(samples=n, job__storage="ckpt.gz", job__mantissa_bits=4)
    runner("run", "--config", conf, check=True)
    out = out_dir(conf)
    with open(os.path.join(out, "dataset.json")) as f:
        assert json.load(f)["mantissa_bits"] == 4
    got = tensors(conf)
    for i in range(n):
        for k in ("hidden_state", "aux_hidden_state"):
            assert torch.equal(got[i][k], round_mantissa(truth[i][k], 4)), (i, k)
            assert 0.003 < relative_error(truth[i][k], got[i][k]) < 0.03
        assert check_tensors(truth[i], 64, "bfloat16", mantissa_bits=4).startswith("hidden_state holds more")
    code, rep = verify(conf)
    assert code == 0 and rep["complete"], rep
    with open(conf) as f:
        text = f.read()
    with open(conf, "w") as f:
        f.write(text.replace("mantissa_bits = 4", "mantissa_bits = 7"))
    p = runner("run", "--config", conf)
    assert p.returncode == 1 and "mantissa_bits: 4 -> 7" in p.stderr, p.stderr[-500:]


def test_mantissa_bits_are_checked_in_the_config(tmp_path):
    from runner.contract.config import from_dict
    from runner.contract.errors import ConfigError

    base = {"job": {"model": "m", "dataset": "d", "out": "o"}}
    for job, says in (
        ({"mantissa_bits": 8}, "mantissa_bits must be 0..7"),
        ({"mantissa_bits": 4, "dtype": "float32"}, "bfloat16 files only"),
        ({"storage": "zip"}, "storage must be one of 'ckpt', 'ckpt.gz'"),
    ):
        with pytest.raises(ConfigError, match=says):
            from_dict({"job": {**base["job"], **job}}, base_dir=str(tmp_path))
