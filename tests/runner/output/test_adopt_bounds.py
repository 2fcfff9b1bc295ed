"""What adopt may touch: only directories under ``[job] adopt_roots``; in a foreign tree, only
the files it adopts (a bad one is reported and left where it is); and a ``.ckpt.gz`` is never
inflated past the size a sample of this job can have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import pytest

from tests.conftest import runner
from tests.runner.helpers import out_dir, unrecorded_ckpts
from tests.runner.output.conftest import N, save
from tests.runner.output.test_adopt import adopt, quarantine

RUNNER_ARGS = ("adopt", "--json", "--config")


def tree(root) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()  # noqa: SIM115
        for d, _, names in os.walk(root)
        for n in names
    }


def test_adopt_refuses_a_dir_outside_its_roots_and_touches_nothing(job, tmp_path):
    conf = job(samples=4)
    out = out_dir(conf)
    home = tmp_path / "someone-else"
    (home / "rows_0-2000").mkdir(parents=True)
    (home / "rows_0-2000" / "data_0.ckpt").write_bytes(b"not a sample")
    (home / "epoch_3.pt").write_bytes(b"their checkpoint")
    before = tree(home)
    link = os.path.join(os.path.dirname(conf), "inside-but-points-out")
    os.symlink(home, link)
    for d in (str(home), link, "/"):
        p = runner(*RUNNER_ARGS, conf, d)
        rep = json.loads(p.stdout)
        assert p.returncode == 3 and rep["refused"], rep
        assert "adopt_roots" in rep["reason"] and os.path.dirname(conf) in rep["reason"], rep
    assert tree(home) == before
    assert not os.path.exists(os.path.join(out, "manifest.jsonl")) and quarantine(out) == []


@pytest.mark.slow
def test_adopt_leaves_what_it_does_not_adopt_in_a_foreign_tree(reference, job, tmp_path):
    import torch

    _, truth = reference
    home = tmp_path / "home"
    save(str(home / "data_0.pt"), truth[0])  # a sample of this job: adopted (moved)
    save(str(home / "sub" / "data_0.ckpt"), truth[0])  # a second copy
    save(str(home / "data_2.pt"), truth[2])
    os.truncate(home / "data_2.pt", os.path.getsize(home / "data_2.pt") // 2)  # bad
    save(str(home / "rows_0-2000" / f"data_{N + 3}.ckpt"), truth[1])  # stray
    os.makedirs(home / "runs")
    torch.save({"w": torch.zeros(4)}, home / "runs" / "epoch_3.pt")  # not a sample at all
    conf = job(samples=N, job__adopt_roots=[str(tmp_path)])
    out = out_dir(conf)
    code, rep = adopt(conf, home)
    assert code == 0 and rep["adopted_idx"] == [0], rep
    assert list(rep["bad"]) == ["2"] and rep["stray"] == [N + 3]
    assert str(home / "runs" / "epoch_3.pt") in rep["unindexed"]
    left = {os.path.relpath(x["path"], home): x["reason"] for x in rep["left"]}
    assert sorted(left) == ["data_2.pt", f"rows_0-2000/data_{N + 3}.ckpt", "sub/data_0.ckpt"], left
    assert sorted(tree(home)) == [
        "data_2.pt",
        f"rows_0-2000/data_{N + 3}.ckpt",
        "runs/epoch_3.pt",
        "sub/data_0.ckpt",
    ]
    assert quarantine(out) == [] and rep["quarantined"] == [] and unrecorded_ckpts(out) == []
    assert "left in place" in runner("adopt", "--config", conf, str(home)).stdout
    from runner.contract.replies import AdoptReport
    from runner.text.extraction import render_adopt

    assert "left where they are (not the job's tree): 3 files" in render_adopt(AdoptReport.from_dict(rep))


def bomb(path, gib: int = 1) -> None:
    """Gigabytes of zeros in a few hundred kilobytes of gzip, under a sample's name."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(64 << 20)
    with open(path, "wb") as f:
        for _ in range(16 * gib):
            f.write(z.compress(block))
        f.write(z.flush())


# Started by a small process of its own: Linux keeps a process's peak RSS across exec, so a
# runner spawned straight from pytest (vfork) counts pytest's own peak, ~900 MiB late in the suite.
FORKER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\\n{usage.ru_maxrss}\\n")
"""


def peak_rss_mib(*args) -> tuple[int, str]:
    """Run hsx-runner; its own peak resident memory (wait4's rusage of it alone)."""
    from tests.conftest import RUNNER

    p = subprocess.run([sys.executable, "-c", FORKER, RUNNER, *args], capture_output=True, text=True)
    return int(p.stderr.split()[-1]) // 1024, p.stdout


@pytest.mark.slow
def test_a_gzip_bomb_is_reported_corrupt_without_the_memory_spike(reference, job, tmp_path):
    _, truth = reference
    src = tmp_path / "old"
    (src / "rows_0-2000").mkdir(parents=True)
    save(str(src / "rows_0-2000" / "data_0.ckpt"), truth[0])
    bomb(src / "rows_0-2000" / "data_1.ckpt.gz")
    conf = job(samples=N, job__adopt_roots=[str(tmp_path)])
    mib, stdout = peak_rss_mib(*RUNNER_ARGS, conf, str(src))
    rep = json.loads(stdout)
    assert rep["adopted_idx"] == [0] and "more than" in rep["bad"]["1"], rep
    assert mib < 900, f"adopt peaked at {mib} MiB on a 1 GiB gzip bomb"
    assert os.path.exists(src / "rows_0-2000" / "data_1.ckpt.gz")  # reported, left in place


def test_adopt_roots_resolve_against_the_config_and_must_be_paths():
    from runner.contract.config import ConfigError, from_dict

    cfg = from_dict({"job": {"adopt_roots": ["old-runs", "/data/x/../y"]}}, base_dir="/etc/hsx")
    assert cfg.job.adopt_roots == ["/etc/hsx/old-runs", "/data/y"]
    for bad in ([""], [3], "old-runs"):
        with pytest.raises(ConfigError, match="adopt_roots"):
            from_dict({"job": {"adopt_roots": bad}})
