"""``hsx-runner compact`` on real outputs of the reference backend: a raw output re-encoded in
place to ckpt.gz (and rounded, when asked), killed with SIGKILL at each step of a sample's
commit and resumed, beside a running job, with SpecForge's own discovery and loader reading the
output at every stop: each sample at most once, and equal to what was written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from runner.output.store import FILE_RE
from tests.conftest import ROOT, runner
from tests.runner.helpers import (
    assert_items_equal,
    assert_same_tensors,
    done_count,
    kill_group,
    out_dir,
    specforge_items,
    start_run,
    tensors,
    verify,
    wait_for,
)

pytestmark = pytest.mark.slow  # real runner processes (torch)
N = 16


def files(out: str) -> dict[int, list[str]]:
    """Every file SpecForge's discovery would take (any *.ckpt / *.ckpt.gz under out), by index."""
    seen: dict[int, list[str]] = {}
    for d, _dirs, names in os.walk(out):
        for n in names:
            if n.endswith((".ckpt", ".ckpt.gz")):
                seen.setdefault(int(FILE_RE.fullmatch(n).group(1)), []).append(os.path.join(d, n))
    return seen


def set_job(conf: str, **keys) -> None:
    with open(conf) as f:
        lines = [ln for ln in f.read().splitlines() if ln.split(" = ")[0] not in keys]
    at = lines.index("[job]") + 1
    lines[at:at] = [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")


def compact(conf: str, *extra) -> tuple[int, dict]:
    p = runner("compact", "--json", "--config", conf, *extra)
    return p.returncode, json.loads(p.stdout)


# Kill the compact at the Nth sample's commit, at one point of it: a real SIGKILL of a real
# process (its own), placed by wrapping the module's step functions.
KILLER = """
import os, signal, sys
from runner import cli
from runner.output import compact
point, nth = sys.argv[1], int(sys.argv[2])
seen = {"n": 0}
def die():
    os.kill(os.getpid(), signal.SIGKILL)
def at_commit(real):
    def wrapped(*a, **k):
        seen["n"] += 1
        if point == "before_journal" and seen["n"] == nth:
            die()
        return real(*a, **k)
    return wrapped
def at_line(real):
    def wrapped(*a, **k):
        if point == "parked" and seen["n"] == nth:
            die()
        real(*a, **k)
        if point == "line" and seen["n"] == nth:
            die()
    return wrapped
compact._commit = at_commit(compact._commit)
compact._append_line = at_line(compact._append_line)
sys.exit(cli.main(["compact", "--config", sys.argv[3]]))
"""


def killed_compact(conf: str, point: str, nth: int) -> None:
    p = subprocess.run([sys.executable, "-c", KILLER, point, str(nth), conf], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert p.returncode == -signal.SIGKILL, (point, p.returncode, p.stderr[-800:])


@pytest.fixture(scope="module")
def raw_run(tmp_path_factory, demo_assets):
    """One finished raw job, run once; each test gets it back as it was (same directory, so
    dataset.json's pinned paths hold)."""
    from tests.conftest import write_job

    conf = write_job(tmp_path_factory.mktemp("compact") / "job", demo_assets, N)
    runner("run", "--config", conf, check=True)
    pristine = os.path.dirname(conf) + ".pristine"
    shutil.copytree(os.path.dirname(conf), pristine)
    return conf, pristine, tensors(conf)


@pytest.fixture
def raw_job(raw_run):
    conf, pristine, truth = raw_run
    shutil.rmtree(os.path.dirname(conf))
    shutil.copytree(pristine, os.path.dirname(conf))
    return conf, truth


def test_compact_killed_at_each_step_loses_nothing_and_specforge_sees_each_sample_once(raw_job, specforge):
    conf, truth = raw_job
    out = out_dir(conf)
    raw_bytes = sum(os.path.getsize(p) for (p,) in files(out).values())
    assert_items_equal(specforge_items(specforge, out), truth)
    set_job(conf, storage="ckpt.gz")
    for point, nth in (("before_journal", 3), ("parked", 2), ("line", 2)):
        killed_compact(conf, point, nth)
        found = files(out)
        assert all(len(v) == 1 for v in found.values()), found
        items = specforge_items(specforge, out)
        assert_items_equal(items, truth)  # what SpecForge reads now is what was extracted
        # a kill between the old file leaving and the new one coming leaves that sample out of
        # SpecForge's view (never twice, never a file its name misdescribes) until it is finished
        missing = set(truth) - set(items)
        assert len(missing) <= (point != "before_journal"), (point, missing)
        assert {p.endswith(".gz") for (p,) in found.values()} == {True, False}  # part way
    # the job's next start finishes the killed compact's sample before it plans: nothing redone
    lines = sum(1 for _ in open(os.path.join(out, "manifest.jsonl")))
    runner("run", "--config", conf, check=True)
    assert sorted(files(out)) == list(range(N))
    assert not os.path.exists(os.path.join(out, ".compact", "inflight.json"))
    with open(os.path.join(out, "manifest.jsonl")) as f:
        new = [json.loads(x) for x in f.readlines()[lines:]]
    assert all(x["storage"] == "ckpt.gz" for x in new) and len(new) <= 1, new  # the finished commit's line
    code, rep = compact(conf)
    assert code == 0 and rep["complete"], rep
    assert rep["recoded"] + rep["already"] == N and rep["already"] > 0
    found = files(out)
    assert sorted(found) == list(range(N)) and all(p.endswith(".ckpt.gz") for (p,) in found.values())
    assert sorted(os.listdir(os.path.join(out, ".compact"))) == ["lock"]  # no part, old file or journal
    assert_items_equal(specforge_items(specforge, out), truth)
    assert_same_tensors(tensors(conf), truth)
    for quick in ((), ("--quick",)):
        code, v = verify(conf, *quick)
        assert code == 0 and v["complete"], v
    gz_bytes = sum(os.path.getsize(p) for (p,) in found.values())
    assert gz_bytes < raw_bytes
    with open(os.path.join(out, "dataset.json")) as f:
        assert json.load(f)["storage"] == "ckpt.gz"
    code, again = compact(conf)  # nothing left to do, and it says so
    assert code == 0 and again["recoded"] == 0 and again["already"] == N


def test_compact_beside_a_running_job_then_the_job_and_specforge_agree(job, specforge):
    conf = job(samples=40)
    p = start_run(conf)
    wait_for(lambda: done_count(conf) >= 10, timeout=120, what="10 raw samples")
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 0
    set_job(conf, storage="ckpt.gz")  # the operator switches, resumes, and compacts beside it
    p = start_run(conf)
    try:
        wait_for(lambda: done_count(conf) >= 14, timeout=120, what="the resumed run writing")
        code, rep = compact(conf)
        assert code == 0 and rep["recoded"] >= 10, rep
        assert p.wait(300) == 0, p.stderr.read()[-800:]
    finally:
        kill_group(p.pid)
    out = out_dir(conf)
    compact(conf)  # whatever the job still wrote raw before it saw the switch
    found = files(out)
    assert sorted(found) == list(range(40)) and all(p.endswith(".gz") for (p,) in found.values())
    code, v = verify(conf)
    assert code == 0 and v["complete"], v
    truth = tensors(conf)
    assert_items_equal(specforge_items(specforge, out), truth)


def test_compact_rounds_when_the_job_asks_and_only_with_the_job_stopped(raw_job):
    import torch

    from runner.codec.precision import round_mantissa
    from runner.output.lock import JobLock

    conf, truth = raw_job
    out = out_dir(conf)
    set_job(conf, storage="ckpt.gz", mantissa_bits=4)
    p = runner("run", "--config", conf)  # the job itself refuses, and names the way out
    assert p.returncode == 1 and "mantissa_bits: 7 -> 4" in p.stderr and "hsx-runner compact" in p.stderr
    held = JobLock(os.path.join(out, ".lock"))
    held.acquire()  # a runner holds the job
    try:
        code, rep = compact(conf)
        assert code == 3 and "needs the job stopped" in rep["reason"], rep
    finally:
        held.release()
    assert all(p.endswith(".ckpt") for (p,) in files(out).values())  # refused: nothing changed
    code, rep = compact(conf)
    assert code == 0 and rep["pinned_bits"] == 4 and rep["recoded"] == N, rep
    got = tensors(conf)
    for i in truth:
        for k in ("hidden_state", "aux_hidden_state"):
            assert torch.equal(got[i][k], round_mantissa(truth[i][k], 4)), (i, k)
        assert torch.equal(got[i]["input_ids"], truth[i]["input_ids"])
    with open(os.path.join(out, "dataset.json")) as f:
        assert json.load(f)["mantissa_bits"] == 4
    code, v = verify(conf)
    assert code == 0 and v["complete"], v
    runner("run", "--config", conf, check=True)  # the job agrees with its output again
    set_job(conf, mantissa_bits=7)
    code, rep = compact(conf)
    assert code == 3 and "cannot bring back" in rep["reason"], rep


def test_a_corrupt_sample_is_left_as_it_was_and_named(raw_job):
    conf, _ = raw_job
    out = out_dir(conf)
    (bad,) = files(out)[5]
    data = bytearray(open(bad, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(bad, "wb").write(bytes(data))
    set_job(conf, storage="ckpt.gz")
    code, rep = compact(conf)
    assert code == 1 and not rep["complete"] and rep["recoded"] == N - 1, rep
    assert "checksum differs from the manifest" in rep["skipped"]["5"]
    assert files(out)[5] == [bad] and open(bad, "rb").read() == bytes(data)  # as it was
    assert sorted(os.listdir(os.path.join(out, ".compact"))) == ["lock"]


def test_an_edited_journal_moves_nothing_outside_the_sample_it_names(raw_job, tmp_path):
    """The journal's files are derived from its index and the store's layout: one that names
    other paths is refused (compact) or passed over (a job's start), and those files stay."""
    conf, truth = raw_job
    out = out_dir(conf)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim, part = elsewhere / "precious.db", elsewhere / "payload"
    victim.write_bytes(b"someone's data")
    part.write_bytes(b"what would replace it")
    with open(os.path.join(out, "manifest.jsonl")) as f:
        line = next(r for r in map(json.loads, f) if r["idx"] == 3) | {
            "storage": "ckpt.gz"
        }  # as compact writes it
    journal = os.path.join(out, ".compact", "inflight.json")
    os.makedirs(os.path.dirname(journal), exist_ok=True)
    with open(journal, "w") as f:
        json.dump({"part": str(part), "src": str(victim), "park": str(elsewhere / "parked"),
                   "new": str(elsewhere / "precious.db.new"), "line": line}, f)  # fmt: skip
    before = files(out)

    runner("run", "--config", conf, check=True)  # a job's start would finish a killed compact
    code, rep = compact(conf)
    assert code == 3 and "inflight.json" in rep["reason"] and "precious.db" in rep["reason"], rep
    assert victim.read_bytes() == b"someone's data" and part.read_bytes() == b"what would replace it"
    assert sorted(os.listdir(elsewhere)) == ["payload", "precious.db"]
    assert files(out) == before and os.path.exists(journal)  # left for a person to look at
    assert_same_tensors(tensors(conf), truth)
