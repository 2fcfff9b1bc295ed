"""LiveStatus as a unit: a box whose status call blocks until the test lets it go. The real
proof (sshd killed, frozen, a session hung mid-command) is tests/bot/verbs/test_status_answer.py."""

from __future__ import annotations

import threading
import time

from remote import retry
from remote.errors import AuthFailed, NoAnswer, Unreachable
from remote.live import LiveStatus
from runner.contract.status import Phase, StatusRecord

REC = StatusRecord(job="j", phase=Phase.EXTRACTING, total=100, done=40)


class Box:
    """status() answers what the test queues, each when the test releases it."""

    def __init__(self):
        self.calls = 0
        self.go = threading.Event()
        self.go.set()
        self.answers: list = [REC]
        self.attempt_errors: list = []

    def status(self) -> StatusRecord:
        self.calls += 1
        for err in self.attempt_errors:  # failed attempts that remote.retry would retry
            retry.call(_fail_once(err))
        self.go.wait(30)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _fail_once(err):
    state = {"n": 0}

    def fn():
        state["n"] += 1
        if state["n"] == 1:
            raise err
        return None

    return fn


def test_a_fresh_read_is_the_true_status():
    box = Box()
    r = LiveStatus(box).read(2.0)
    assert r.fresh and r.record is REC and r.error is None and not r.retrying


def test_a_read_that_hangs_answers_in_time_with_the_last_record_then_catches_up(tmp_path):
    box = Box()
    live = LiveStatus(box, str(tmp_path / "last.json"))
    assert live.read(2.0).fresh
    box.go.clear()  # the box stops answering
    box.answers = [StatusRecord(job="j", phase=Phase.EXTRACTING, total=100, done=55)]
    start = time.monotonic()
    r = live.read(0.3)
    assert time.monotonic() - start < 2.0
    assert not r.fresh and r.retrying and r.record.done == 40 and r.seen_at is not None
    assert isinstance(r.error, NoAnswer) and r.failing_since is not None
    again = live.read(0.1)  # joins the read under way instead of starting another
    assert box.calls == 2 and again.failing_since == r.failing_since
    box.go.set()  # it comes back: the read under way gets the new record
    deadline = time.monotonic() + 5
    while (r := live.read(0.5)).record.done != 55:
        assert time.monotonic() < deadline
    assert r.fresh and r.failing_since is None


def test_the_last_record_survives_the_process(tmp_path):
    """`hsx status` in a new process knows what the bot saw last, and since when it fails."""
    path = str(tmp_path / "ops" / "last.json")
    box = Box()
    assert LiveStatus(box, path).read(2.0).fresh
    box.answers = [Unreachable("target", "127.0.0.3:22: Connection refused")]
    failed = LiveStatus(box, path).read(2.0)
    assert not failed.fresh and not failed.retrying and failed.error.hop == "target"
    box.go.clear()
    r = LiveStatus(box, path).read(0.2)
    assert r.record.done == 40 and abs((r.failing_since - failed.failing_since).total_seconds()) < 0.01
    assert r.error is not None and r.retrying
    box.go.set()


def test_an_attempt_that_failed_is_reported_while_the_read_still_retries():
    box = Box()
    box.go.clear()
    box.attempt_errors = [Unreachable("target", "the jump host cannot connect to 10.1.230.174:22")]
    r = LiveStatus(box).read(0.5)
    assert isinstance(r.error, Unreachable) and "cannot connect" in r.error.detail
    box.go.set()


def test_a_cause_to_fix_is_not_called_transient():
    box = Box()
    box.answers = [AuthFailed("target", "root@gpu refused every key")]
    r = LiveStatus(box).read(2.0)
    assert not r.fresh and not r.error.transient and r.record is None


def test_an_unreadable_file_starts_without_a_record(tmp_path):
    path = tmp_path / "last.json"
    path.write_text('{"record": {"phase": "nonsense"}')
    box = Box()
    box.go.clear()
    r = LiveStatus(box, str(path)).read(0.1)
    assert r.record is None and not r.fresh
    box.go.set()
