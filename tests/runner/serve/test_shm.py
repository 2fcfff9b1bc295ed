"""What a dead server leaves in /dev/shm is removed, and only that (runner/serve/shm.py): real
processes that map, open and link files in a stand-in shm folder, then die by kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from runner import procs
from runner.serve import server as srv
from runner.serve import shm
from tests.runner.helpers import wait_for

# A child in its own process group: maps one file, holds another open, makes a semaphore-like
# file (mapped under a temporary name, then linked under its real one and the temporary name
# removed), and names one SGLang's way with its own pid; then waits to be killed.
CHILD = textwrap.dedent(
    """
    import mmap, os, sys, time
    d = sys.argv[1]
    def make(name):
        with open(os.path.join(d, name), "wb") as f:
            f.write(b"x" * 4096)
    make("mapped"); make("opened"); make("sem.tmpXYZ")
    m1 = mmap.mmap(os.open(os.path.join(d, "mapped"), os.O_RDWR), 4096)
    fd = os.open(os.path.join(d, "opened"), os.O_RDONLY)
    m2 = mmap.mmap(os.open(os.path.join(d, "sem.tmpXYZ"), os.O_RDWR), 4096)
    os.link(os.path.join(d, "sem.tmpXYZ"), os.path.join(d, "sem.mp-abc"))
    os.unlink(os.path.join(d, "sem.tmpXYZ"))
    make(f"sgl_shm_mq_{os.getpid()}_0123abcd")
    print("ready", flush=True)
    time.sleep(600)
    """
)
OURS = {"mapped", "opened", "sem.mp-abc"}


def _child(d):
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(d)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def test_a_dead_servers_files_are_removed_and_nothing_else(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    (d / "someone_elses").write_bytes(b"y")  # not held by the group, not stamped with its pid
    (d / "sgl_shm_mq_1_0123abcd").write_bytes(b"y")  # stamped with a pid that is not the group's
    tracker = shm.ShmTracker(str(tmp_path / "server.shm.json"), shm_dir=str(d))
    tracker.begin()  # as the server starts
    held_here = open(d / "held_by_a_live_process", "wb")  # noqa: SIM115 - held open on purpose
    p = _child(d)
    tracker.observe(p.pid)
    assert set(tracker.files) >= OURS
    assert p.pid in tracker.pids
    tracker.files["held_by_a_live_process"] = os.stat(
        d / "held_by_a_live_process"
    ).st_ino  # a live holder keeps it
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    removed = tracker.cleanup(p.pid)
    assert set(removed) == OURS | {f"sgl_shm_mq_{p.pid}_0123abcd"}
    assert sorted(os.listdir(d)) == ["held_by_a_live_process", "sgl_shm_mq_1_0123abcd", "someone_elses"]
    held_here.close()


def test_a_killed_runners_notes_let_the_next_one_clean_up(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    dead_runners = shm.ShmTracker(str(tmp_path / "notes.json"), shm_dir=str(d))
    dead_runners.begin()
    p = _child(d)
    dead_runners.observe(p.pid)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    again = shm.ShmTracker(str(tmp_path / "notes.json"), shm_dir=str(d))  # the next runner's start
    assert len(again.cleanup(p.pid)) == 4 and os.listdir(d) == []
    assert shm.ShmTracker(str(tmp_path / "notes.json"), shm_dir=str(d)).pids == set()  # starts afresh


def test_unreadable_notes_remove_nothing(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    (d / "mapped").write_bytes(b"x")
    (tmp_path / "notes.json").write_text("{not json")
    assert shm.ShmTracker(str(tmp_path / "notes.json"), shm_dir=str(d)).cleanup() == []
    assert os.listdir(d) == ["mapped"]


def test_a_rank_killed_by_a_signal_is_named_before_one_that_exited_after_it():
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(killed.pid, signal.SIGKILL)
        # both zombies, not reaped: their status is still there
        wait_for(
            lambda: all(procs.proc_stat(q.pid)[0] == "Z" for q in (killed, exited)), 10, 0.02, "two zombies"
        )
        ranks = {"TP0": exited.pid, "TP1": killed.pid, "TP2": alive.pid}
        assert srv.rank_death(ranks) == f"TP1 scheduler (pid {killed.pid}) died, killed by SIGKILL"
        assert srv.rank_death({"TP0": exited.pid}) == f"TP0 scheduler (pid {exited.pid}) died, exit code 3"
        assert srv.rank_death({"TP2": alive.pid}) == ""
    finally:
        alive.kill()
        for q in (killed, exited, alive):
            q.wait()
    assert srv.rank_death({"TP1": killed.pid}) == f"TP1 scheduler (pid {killed.pid}) died"  # reaped: gone


def test_a_rank_reaped_before_it_was_seen_takes_how_it_died_from_the_watchdog_line():
    """SGLang's main process may reap a killed rank before the runner's poll sees its zombie;
    the watchdog's line about that pid then says how (a CI run lost 'killed by SIGKILL' so)."""
    seen = [("TP1", 101, "")]
    log = "[2026-12-01 07:42:01] Subprocess scheduler_1 (pid=101) crashed with exit code -9. Triggering SIGQUIT\n"
    assert srv.say_deaths(seen, log) == "TP1 scheduler (pid 101) died, killed by SIGKILL"
    other = "Subprocess scheduler_0 (pid=100) crashed with exit code 1.\n"  # another pid's line says nothing of it
    assert srv.say_deaths(seen, other) == "TP1 scheduler (pid 101) died"
    assert srv.say_deaths([("TP0", 100, "exit code 3")], other) == "TP0 scheduler (pid 100) died, exit code 3"


def test_the_server_log_names_the_rank_when_sglangs_watchdog_saw_it():
    log = (
        "hsx dump patch installed in TP0 pid 100 (writer=True, dump dir /o/.tmp)\n"
        "hsx dump patch installed in TP1 pid 101 (writer=False, dump dir /o/.tmp)\n"
        "[2026-12-01 07:42:01] Subprocess scheduler_1 (pid=101) crashed with exit code -9. Triggering SIGQUIT\n"
    )
    assert srv.death_reason(log) == "TP1 scheduler (pid 101) died, killed by SIGKILL"
    assert srv.death_reason("Subprocess detokenizer (pid=7) crashed with exit code 1.") == (
        "detokenizer (pid 7) died, exit code 1"
    )
    assert srv.death_reason("nothing about it") == ""


# A server process that opens a file it finds in /dev/shm (a model or dataset put there) and
# makes one of its own; both held until it is killed.
OPENER = textwrap.dedent(
    """
    import mmap, os, sys, time
    found, made = sys.argv[1], sys.argv[2]
    m = mmap.mmap(os.open(found, os.O_RDONLY), 0, prot=mmap.PROT_READ)
    with open(made, "wb") as f:
        f.write(b"x" * 4096)
    fd = os.open(made, os.O_RDONLY)
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_files_that_were_in_dev_shm_before_the_server_started_are_never_removed(tmp_path):
    """In the real /dev/shm: the weights an operator put there before the start (mapped by the
    server) stay; the segment the server made after it started goes."""
    tag = f"hsx-test-{os.getpid()}-{time.monotonic_ns()}"
    found, made = os.path.join(shm.SHM_DIR, f"{tag}-weights"), os.path.join(shm.SHM_DIR, f"{tag}-segment")
    with open(found, "wb") as f:
        f.write(b"w" * 8192)
    try:
        tracker = shm.ShmTracker(str(tmp_path / "server.shm.json"))
        tracker.begin()  # as the server starts
        p = subprocess.Popen([sys.executable, "-c", OPENER, found, made], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)  # fmt: skip
        assert p.stdout.readline().strip() == "ready"
        tracker.observe(p.pid)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        again = shm.ShmTracker(str(tmp_path / "server.shm.json"))  # the next runner's start, from the notes
        assert again.cleanup(p.pid) == [os.path.basename(made)]
        assert os.path.exists(found) and not os.path.exists(made)
    finally:
        for f in (found, made):
            if os.path.exists(f):
                os.unlink(f)


def test_the_jobs_own_paths_in_dev_shm_are_never_removed(tmp_path):
    """[job] model (or dataset, tokenizer) in the shm folder itself, put there even after the
    start: the job's input, never the server's segment."""
    d = tmp_path / "shm"
    d.mkdir()
    tracker = shm.ShmTracker(str(tmp_path / "notes.json"), shm_dir=str(d), keep=(str(d / "model.bin"),))
    tracker.begin()
    (d / "model.bin").write_bytes(b"w" * 8192)
    p = subprocess.Popen([sys.executable, "-c", OPENER, str(d / "model.bin"), str(d / "segment")],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    assert p.stdout.readline().strip() == "ready"
    tracker.observe(p.pid)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert tracker.cleanup(p.pid) == ["segment"] and os.listdir(d) == ["model.bin"]
