"""The held connection notices a peer that stops answering within the keepalive interval,
not at TCP's timeout: real jump + target sshd (tests/sshd.py), the target's processes
SIGSTOPped as a frozen VM's would be (its kernel still ACKs, so TCP notices nothing)."""

from __future__ import annotations

import threading
import time

import pytest

from remote.errors import RemoteError, Unreachable
from runner.contract import timing
from tests import sshd

from .test_ssh import make

SLACK_S = 3.0  # 2 slow cores
SLEEP = ["/bin/sleep", "49.75"]  # its argv is this test's alone


def noticed_within() -> float:
    """One keepalive interval, one probe, and the slack."""
    t = timing.current()
    return t.keepalive_s + t.probe_s + SLACK_S


def wait_until(cond, limit_s: float) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > limit_s:
            raise AssertionError(f"not within {limit_s:.1f}s")
        time.sleep(0.02)
    return time.monotonic() - start


def test_an_idle_connection_whose_peer_hangs_is_dropped_within_the_keepalive(pair, closing):
    t = make(pair)
    closing.append(t)
    assert t.run(["/bin/echo", "up"], 10).stdout == "up\n"
    pair.pause_sessions(pair.target)  # the held session hangs; the listener still answers
    took = wait_until(lambda: not t.connected(), noticed_within())
    assert took < noticed_within()
    start = time.monotonic()
    assert t.run(["/bin/echo", "fresh"], 10).stdout == "fresh\n"  # a new connection gets through
    assert time.monotonic() - start < 5


def test_a_command_whose_peer_hangs_mid_command_fails_within_the_keepalive(pair, closing):
    t = make(pair, attempts=1)
    closing.append(t)
    assert t.run(["/bin/true"], 10).code == 0
    got: dict = {}

    def run() -> None:
        start = time.monotonic()
        try:
            t.run(SLEEP, 60)
        except RemoteError as e:
            got["error"] = e
        got["took"] = time.monotonic() - start

    th = threading.Thread(target=run)
    th.start()
    wait_until(lambda: sshd.running(SLEEP), 30)  # the command runs on the target
    paused_at = time.monotonic()
    pair.pause(pair.target)  # the whole box freezes mid-command
    try:
        th.join(noticed_within() + 1)
        assert "took" in got, "the command still waits on a peer that stopped answering"
        assert time.monotonic() - paused_at < noticed_within()
        err = got["error"]
        assert isinstance(err, Unreachable) and err.hop == "target", err  # the jump still answers
        assert "keepalive" in str(err)
    finally:
        pair.pause(pair.target, False)


def test_close_does_not_wait_for_a_connect_to_a_hung_box(pair, closing):
    t = make(pair, connect_timeout_s=10.0)
    closing.append(t)
    pair.pause(pair.target)  # TCP is accepted, the SSH banner never comes
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            t.run(["/bin/true"], 10)
        except RemoteError as e:
            errors.append(e)
        done.set()

    try:
        threading.Thread(target=run, daemon=True).start()
        # the handshake is under way: the jump has forwarded the connection to the frozen target
        wait_until(lambda: sshd.connections_to(pair.target.addr, pair.target.port) > 0, 30)
        start = time.monotonic()
        t.close()
        assert time.monotonic() - start < 1.5
        assert done.wait(3.0), "the call went on after close"
        assert errors and not t.connected()
    finally:
        pair.pause(pair.target, False)


@pytest.mark.parametrize("hop_name", ["jump", "target"])
def test_the_hop_that_hangs_is_named(pair, closing, hop_name):
    """Each hop is probed on its own, so a hung target is not blamed on the jump."""
    t = make(pair, attempts=1, connect_timeout_s=1.0)
    closing.append(t)
    assert t.run(["/bin/true"], 10).code == 0
    hop = getattr(pair, hop_name)
    pair.pause(hop)
    try:
        start = time.monotonic()
        with pytest.raises(Unreachable) as e:
            t.run(["/bin/true"], 10)  # both hops probed, then one reconnect that cannot get through
        assert time.monotonic() - start < 2 * timing.current().probe_s + 1.0 + SLACK_S
        assert e.value.hop == hop_name
    finally:
        pair.pause(hop, False)


def test_a_command_that_changes_the_box_is_never_sent_twice(pair, closing, tmp_path):
    """A start whose connection is lost mid-command may have run: retried, it would answer
    "refused: already running" of its own run (found beside the busy suite: a keepalive missed
    under load, and the chat's first start said refused). Sent once, the error says it may have
    run; a read is still retried."""
    records: list = []
    t = make(pair, records)
    closing.append(t)
    marks = tmp_path / "runs"
    argv = ["/bin/sh", "-c", f"echo ran >> {marks}; exec /bin/sleep 48.5"]
    got: dict = {}

    def run() -> None:
        try:
            t.run(argv, 60, once=True)
        except RemoteError as e:
            got["error"] = e

    th = threading.Thread(target=run)
    th.start()
    wait_until(lambda: sshd.running(["/bin/sleep", "48.5"]), 30)  # sent, and running on the target
    pair.pause(pair.target)
    try:
        th.join(noticed_within() + 1)
        err = got.get("error")
        assert isinstance(err, Unreachable) and not err.transient, err
        assert "may have run: ask the status first" in str(err)
        assert records == [] and marks.read_text() == "ran\n"  # never sent again
    finally:
        pair.pause(pair.target, False)
