"""Faults with several scheduler processes, in the real SGLang at TP 2: a kill -9 of the rank
that does not write takes the whole server down (SGLang's own watchdog); the runner names the
rank from the server log, removes the shared memory that server left, restarts it within the
cap, and the output (gzipped by the patch) ends equal to an uninterrupted run's."""

from __future__ import annotations

import json
import os
import signal

from runner import procs
from runner.serve import shm
from tests.conftest import runner
from tests.real_sglang.compare import compare
from tests.real_sglang.test_equal_to_reference import jobs, writers
from tests.runner.helpers import (
    done_count,
    kill_group,
    out_dir,
    server_pid,
    start_run,
    status,
    verify,
    wait_for,
)


def _scheduler(pgid: int, rank: int) -> int | None:
    for pid in procs.group(pgid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f"scheduler_TP{rank}".encode() in f.read():
                    return pid
        except OSError:
            pass
    return None


def _note(sg: str, before: set[tuple[str, int]], seen: dict[int, set[tuple[str, int]]]) -> None:
    """This job's segments, (name, inode) by server pid: what its server's processes hold now
    and what the runner noted for that server (server.shm.json). The end's check is of these
    alone: another SGLang server on the machine makes and leaves its own."""
    pid = server_pid(sg)
    if pid is None:
        return
    made = set()
    for name in shm.held(procs.group(pid)):
        try:
            made.add((name, os.stat(os.path.join(shm.SHM_DIR, name)).st_ino))
        except OSError:
            pass
    try:
        with open(os.path.join(out_dir(sg), "server.shm.json")) as f:
            made |= {(name, int(ino)) for name, ino in json.load(f).get("files", {}).items()}
    except (OSError, ValueError):
        pass
    seen.setdefault(pid, set()).update(made - before)


def test_a_dead_non_writing_rank_is_named_cleaned_up_and_restarted(
    tmp_path, demo_assets, models, sglang_python
):
    samples = 28
    before = {(e.name, e.inode()) for e in os.scandir(shm.SHM_DIR)}
    seen: dict[int, set[tuple[str, int]]] = {}
    sg, ref = jobs(tmp_path, demo_assets, models["llama"], "llama", sglang_python, samples=samples, tp=2)
    with open(sg) as f:
        text = f.read()
    with open(sg, "w") as f:  # gzipped by the patch's writers, across the server's death
        f.write(text.replace("[job]\n", '[job]\nstorage = "ckpt.gz"\n', 1))

    def noting(pred):  # the job's segments noted at each look while waiting
        return lambda: _note(sg, before, seen) or pred()

    p = start_run(sg)
    try:
        wait_for(lambda: done_count(sg) >= 5, timeout=300, what="5 samples through the real SGLang at TP 2")
        first = server_pid(sg)
        tp1 = _scheduler(first, 1)
        assert tp1 is not None and done_count(sg) < samples
        _note(sg, before, seen)
        held = shm.held(procs.group(first))
        assert any(n.startswith("sgl_shm_") for n in held), held  # the TP group's message queue
        os.kill(tp1, signal.SIGKILL)
        wait_for(
            noting(lambda: server_pid(sg) not in (None, first)), timeout=120, every=0.5, what="a new server"
        )
        left = held & set(os.listdir(shm.SHM_DIR))
        assert not left, f"the dead server's shared memory is still there: {left}"
        wait_for(noting(lambda: p.poll() is not None), timeout=600, every=0.5, what="the run's end")
        assert p.returncode == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            kill_group(p.pid)
    st = status(sg)
    assert st["phase"] == "done" and st["server"]["restarts"] == 1, st
    assert f"TP1 scheduler (pid {tp1}) died, killed by SIGKILL" in st["server"]["last_death"], st["server"]
    # what this job's two servers made is gone, whoever else on the machine makes and leaves some
    assert len(seen) == 2 and all(seen.values()), seen
    present = {(e.name, e.inode()) for e in os.scandir(shm.SHM_DIR)}
    left = {name for made in seen.values() for name, ino in made if (name, ino) in present}
    assert left == set(), f"a server's shared memory outlived it: {left}"
    assert verify(sg)[0] == 0 and done_count(sg) >= samples
    assert {w.split(" pid ")[0] for w in writers(sg)} == {"TP0"}  # both servers' TP0; TP1 never
    assert os.listdir(os.path.join(out_dir(sg), ".tmp")) == []
    rows = os.listdir(os.path.join(out_dir(sg), "rows_0-2000"))
    assert len(rows) == samples and all(n.endswith(".ckpt.gz") for n in rows), rows
    runner("run", "--config", ref, check=True, timeout=600)
    compare(out_dir(sg), out_dir(ref))
