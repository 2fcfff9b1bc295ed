"""A served run's restarts (runner/job/served.py) without a real server: a death is counted and
named, up to [server] max_restarts; a death while a stop is asked is the stop's (Slurm's scancel
signals the server and the supervisor at once), never a restart counted or a server started again."""

from __future__ import annotations

import asyncio

import pytest

from runner.contract.config import from_dict
from runner.contract.errors import ServerExited
from runner.job.served import Served, Stopped
from runner.regenerate import record


class FakeServer:
    """Dies during start-up each time; ``signal``: when SIGTERM reaches the supervisor, as the
    death is seen ("seen") or while the dead server is ended ("stopping"), else never."""

    def __init__(self, run: Served, signal: str = ""):
        self.run, self.signal = run, signal
        self.starts = self.stops = 0
        self.activity = ""

    async def start(self) -> None:
        self.starts += 1

    async def wait_ready(self, said) -> None:
        said()
        if self.signal == "seen":
            self.run.on_term()
        raise ServerExited("server exited with code -15 during start-up")

    def stop(self) -> None:
        self.stops += 1
        if self.signal == "stopping":
            self.run.on_term()


def _run(tmp_path, restarts: int = 2) -> Served:
    cfg = from_dict(
        {"job": {"name": "t", "model": "m", "dataset": "d", "out": "o"}, "server": {"max_restarts": restarts}}
    )
    return Served(cfg, record.KIND.load(str(tmp_path)))


def test_deaths_are_counted_and_named_until_the_cap(tmp_path):
    run = _run(tmp_path)
    server = FakeServer(run)
    with pytest.raises(Exception, match="restart cap 2 spent"):
        asyncio.run(run.up(server))
    assert server.starts == 3 and run.rec.d["restarts"] == 2 and "code -15" in run.rec.d["last_death"]


@pytest.mark.parametrize("signal", ["seen", "stopping"])
def test_a_death_while_a_stop_is_asked_is_no_restart(tmp_path, signal):
    run = _run(tmp_path)
    server = FakeServer(run, signal)
    with pytest.raises(Stopped):
        asyncio.run(run.up(server))
    assert server.starts == 1 and "restarts" not in run.rec.d and "last_death" not in run.rec.d
