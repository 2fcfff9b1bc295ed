"""The extractor alone, in this process, against the dump contract served by a thread
(tests/runner/fake_server.py): retries, failure notes, late dumps, the consecutive-failure stop.
A server that dies or restarts needs a real child: tests/runner/serve/test_lifecycle.py."""

from __future__ import annotations

import json
import os

import pytest

from runner.contract.config import from_dict
from runner.ports import free_port
from tests.runner.helpers import extract_in_process


def extract(tmp_path, dump_server, mode: str, samples: int, **job):
    """extract_in_process over `samples` pre-tokenized rows of four tokens."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(
        json.dumps({"input_ids": [5 + i, 6, 7, 8], "loss_mask": [0, 1, 1, 1]}) + "\n" for i in range(samples)
    ))  # fmt: skip
    cfg = from_dict({"job": {
        "name": "test", "dataset": str(data), "out": str(tmp_path / "out"), "concurrency": 1,
        "retries": 3, "max_consecutive_failures": 10, "rate_window_s": 30.0, **job,
    }})  # fmt: skip
    return extract_in_process(cfg, dump_server, mode)


def retried(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "hsx.extractor" and "retrying" in r.getMessage()
    ]


@pytest.mark.parametrize("mode", ["flaky", "failing"])
def test_failed_attempts_leave_no_dump_behind(tmp_path, dump_server, caplog, mode):
    # flaky: no sidecar ever comes (waited for dump_wait_s); failing: the server says why at once
    ex, store, err = extract(tmp_path, dump_server, mode, 12, dump_wait_s=0.5)
    assert err is None and ex.transient_failed == 0 and ex.recorder.record.done == 12
    assert sorted(store.manifest()) == list(range(12)) and store.failures() == {}
    why = "disk full (fake)" if mode == "failing" else "wrote no dump for"
    lines = retried(caplog)
    assert len(lines) >= 5 and all(why in line for line in lines), lines
    assert os.listdir(store.tmp) == []  # retried attempts cleaned up


def test_dump_written_after_the_answer_is_waited_for(tmp_path, dump_server, caplog):
    ex, store, err = extract(tmp_path, dump_server, "late", 8)
    assert err is None and ex.recorder.record.done == 8 and sorted(store.manifest()) == list(range(8))
    assert retried(caplog) == []
    assert os.listdir(store.tmp) == []


def test_samples_failing_in_a_row_stop_the_job_with_the_last_reason(tmp_path, dump_server, caplog):
    ex, store, err = extract(tmp_path, dump_server, "bad_dump", 6, max_consecutive_failures=2)
    assert err is not None and "2 samples in a row failed; last: sample 1" in str(err), err
    assert "dump has 3 rows for 4 tokens" in str(err)
    failed = store.failures()
    assert sorted(failed) == [0, 1] and all(
        not f["permanent"] and f["attempts"] == 3 for f in failed.values()
    )
    assert len(retried(caplog)) == 4  # two retries for each of the two samples
    assert store.manifest() == {} and os.listdir(store.tmp) == []
    assert sorted(store.plan(6).remaining) == list(range(6))  # transient failures stay to do


class _DyingServer:
    """A server found dead; ``signal``: when the stop's SIGTERM (Slurm's scancel signals the server
    and the supervisor at once) reaches the extractor: as the death is seen, or while its reason
    is read; else never."""

    def __init__(self, signal: str):
        self.signal, self.ex = signal, None
        self.proc = type("Proc", (), {"returncode": -15, "pid": 1})()
        self.counted = self.starts = 0

    def alive(self) -> bool:
        if self.signal == "seen":
            self.ex.stop()
        return False

    def death_reason(self) -> str:
        if self.signal == "reading":
            self.ex.loop.call_soon_threadsafe(self.ex.stop)
            import time

            time.sleep(0.2)  # the signal's callback runs on the loop meanwhile
        return ""

    async def restart_allowed(self, recorder, why: str) -> bool:
        self.counted += 1
        recorder.record.server.restarts = self.counted
        return self.counted <= 1

    def stop(self, wait: float = 0) -> None:
        pass

    async def start(self) -> None:
        self.starts += 1
        self.ex.stop()  # the test's end: one restart is enough to see

    async def wait_ready(self, said) -> None:
        pass


@pytest.mark.parametrize("signal", ["seen", "reading", ""])
def test_a_server_death_during_a_stop_is_the_stops_not_a_restart(tmp_path, signal):
    """A death while the stop is asked is the stop's: no restart counted or started, no last
    death for the watcher to call a server restart; without a stop, the death is one restart."""
    import asyncio

    from runner.job.extractor import Extractor
    from runner.job.record import Recorder
    from runner.output.ranks import RunPaths

    cfg = from_dict({"job": {"name": "t", "dataset": "d", "out": str(tmp_path / "out")}})
    os.makedirs(cfg.job.out)
    server = _DyingServer(signal)
    rec = Recorder(RunPaths(cfg.job.out), "t", 1, 30.0)

    async def monitor():
        ex = Extractor(cfg, None, None, rec, server, str(tmp_path))
        server.ex, ex.loop = ex, asyncio.get_running_loop()
        await asyncio.wait_for(ex._monitor(), 30)

    asyncio.run(monitor())
    if signal:
        assert (server.counted, server.starts, rec.record.server.last_death) == (0, 0, "")
    else:
        assert server.counted == server.starts == 1 and "code -15" in rec.record.server.last_death


class _Ending:
    """A server whose process is seen alive ``alive_for`` more times after its socket closed
    (None: it lives, and answers /health at ``url``)."""

    def __init__(self, alive_for: int | None, url: str = "http://127.0.0.1:9"):
        self.left, self.url = alive_for, url

    def alive(self) -> bool:
        if self.left is None:
            return True
        self.left -= 1
        return self.left >= 0


@pytest.mark.parametrize("alive_for, died", [(0, True), (3, True), (None, False)])
def test_a_dropped_connection_is_the_servers_death_when_its_process_ends_just_after(
    tmp_path, dump_server, alive_for, died
):
    """A dying server's sockets close a moment before its process is seen gone: that is its death,
    not the sample's failure (each death charged its in-flight samples an attempt: three deaths
    burnt a sample into failed.jsonl on a busy box); a server whose /health answers lives."""
    import asyncio

    import aiohttp

    from runner.job import served

    live = dump_server("ok", str(tmp_path))

    async def ask():
        async with aiohttp.ClientSession() as http:
            gone = f"http://127.0.0.1:{free_port()}"  # a dying server's /health: refused
            return await served.died(http, _Ending(alive_for, live.url if alive_for is None else gone))

    assert asyncio.run(ask()) is died
