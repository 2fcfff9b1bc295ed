"""A stale server pid file kills only the server it names (runner/serve/pidfile.py): real
processes, each in its own process group, named by pid files of every kind a box can hold."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest

from runner.contract.config import load
from runner.output.ranks import RunPaths
from runner.procs import group, proc_stat
from runner.serve import pidfile
from runner.serve.server import Server
from tests.conftest import runner
from tests.runner.helpers import out_dir, wait_for


def _alive(pid: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


@pytest.fixture
def stranger():
    """An unrelated process in a process group of its own, as any other program on the box."""
    p = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield p
    p.kill()
    p.wait()


def _server(conf: str) -> Server:
    cfg = load(conf)
    return Server(cfg, [1, 2, 3], os.path.join(cfg.job.out, ".tmp"), RunPaths(cfg.job.out))


def _identity(pid: int, **changed) -> str:
    return json.dumps({**pidfile.identity(pid), **changed})


@pytest.mark.parametrize(
    "text",
    [
        lambda pid: str(pid),  # an older hsx's file: only a number, nothing to check it by
        lambda pid: _identity(pid, start_time=pidfile.identity(pid)["start_time"] - 1),  # the pid was reused
        lambda pid: _identity(pid, boot_id="0" * 32),  # written before a reboot
        lambda pid: _identity(pid, host="another-node"),  # written on another host, same output dir
        lambda pid: "{not json",
    ],
    ids=["old-format", "other-start-time", "other-boot", "other-host", "unreadable"],
)
def test_a_pid_file_naming_an_unrelated_process_kills_nothing_and_is_removed(job, stranger, text, caplog):
    conf = job(samples=1)
    srv = _server(conf)
    os.makedirs(os.path.dirname(srv.pid_file), exist_ok=True)
    with open(srv.pid_file, "w") as f:
        f.write(text(stranger.pid))
    with caplog.at_level("WARNING", logger="hsx"):
        assert srv.kill_stale() is None
    assert _alive(stranger.pid) and stranger.poll() is None
    assert not os.path.exists(srv.pid_file)
    assert any("left alone" in r.getMessage() for r in caplog.records), caplog.text


def test_the_stale_server_a_dead_runner_left_is_killed(job):
    """The server a runner started (its real start, its real pid file), then the runner gone:
    the next runner's start kills that server's whole process group."""
    conf = job(samples=1)
    first = _server(conf)
    first.argv = ["sh", "-c", "sleep 600 & exec sleep 600"]  # a leader and a child in its group
    asyncio.run(first.start())
    leader = first.proc.pid
    wait_for(lambda: len(group(leader)) == 2, what="the server's child")
    child = (group(leader) - {leader}).pop()
    rec = json.loads(open(first.pid_file).read())
    assert rec == pidfile.identity(leader) and rec["host"] and rec["boot_id"] and rec["start_time"] > 0
    assert _server(conf).kill_stale() == leader
    first.proc.wait(10)
    wait_for(lambda: not _alive(child), timeout=10, what="the server's child killed with it")


@pytest.mark.slow
def test_a_runner_start_leaves_the_process_an_old_pid_file_names_alone(job, stranger):
    """The whole run: an older hsx's server.pid that now names someone else's process; the run
    finishes, that process lives, and the runner's log says why it was left."""
    conf = job(samples=2)
    os.makedirs(out_dir(conf), exist_ok=True)
    with open(os.path.join(out_dir(conf), "server.pid"), "w") as f:
        f.write(str(stranger.pid))
    runner("run", "--config", conf, check=True)
    assert stranger.poll() is None and _alive(stranger.pid)
    log = open(os.path.join(out_dir(conf), "logs", "runner.log")).read()
    assert f"pid {stranger.pid}" in log and "left alone" in log, log
    assert not os.path.exists(os.path.join(out_dir(conf), "server.pid"))
