"""The box's status within a bound, whatever the box does.

A status question ("progress?", `/extract status`, `hsx status`, a watcher poll) starts a read,
or joins the one under way, and waits ``status_answer_s`` for it. A read that gets through in
time is the true status. Otherwise the answer is the last record seen (and when), what is wrong
(the last attempt's error, else that nothing has answered yet) and since when, while the read
goes on in the background: ``remote.retry`` reconnects with bounded backoff, and what it reads
becomes the last record seen.

The last record seen lives here only: in memory and, given a path, in a small file (beside the
watcher's state), so a new `hsx status` process knows what the bot saw last.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.contract import timing
from runner.contract.atomic import write_atomic
from runner.contract.errors import StatusError
from runner.contract.kinds import KINDS
from runner.contract.status import StatusRecord, parse_iso

from . import retry
from .errors import NoAnswer, RemoteError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reading:
    record: Any  # the fresh record, or the last one seen (None: never seen): a StatusRecord, or read's
    fresh: bool  # read just now
    seen_at: dt.datetime | None  # when record was read
    error: RemoteError | None  # why there is no fresh record
    failing_since: dt.datetime | None  # when the box stopped answering
    retrying: bool  # a read is still under way


class _Read:
    def __init__(self, started: dt.datetime):
        self.started = started
        self.done = threading.Event()
        self.error: RemoteError | None = None  # how it ended, when it failed
        self.attempt_error: RemoteError | None = None  # the last failed attempt while it runs


class LiveStatus:
    """One status read at a time for one box, shared by chat, the CLI and the watcher. ``read``
    and ``parse``: another record than the extraction's, read the same way (the training's:
    ``box.record("train")`` and ``TrainRecord.from_dict``; its record needs a ``to_dict``)."""

    def __init__(
        self,
        box,
        path: str = "",
        clock: Callable[[], dt.datetime] | None = None,
        read: Callable[[], Any] | None = None,
        parse: Callable[[Any], Any] = StatusRecord.from_dict,
    ):
        self.box, self.path = box, path
        self._fetch, self._parse = read or box.status, parse
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        self._lock = threading.Lock()
        self._read: _Read | None = None  # the read under way
        self._error: RemoteError | None = None  # how the last read that failed ended
        self._record, self._seen_at, self._failing_since = self._load()

    def kick(self) -> _Read:
        """Start a read (or join the one under way) without waiting; ``read(joining=…)`` waits for
        it later. Kicked before another record's read is waited on, it shares that wait: two
        records answer within one bound."""
        return self._start()

    def _start(self) -> _Read:
        with self._lock:
            r = self._read
            if r is None:
                r = self._read = _Read(self.clock())
                threading.Thread(target=self._run, args=(r,), name="hsx-status-read", daemon=True).start()
            return r

    def read(self, wait_s: float | None = None, joining: _Read | None = None) -> Reading:
        wait_s = timing.current().status_answer_s if wait_s is None else wait_s
        r = joining or self._start()  # a kicked read counts even if it has ended since
        r.done.wait(wait_s)
        with self._lock:
            if r.done.is_set() and r.error is None:
                return Reading(self._record, True, self._seen_at, None, None, False)
            error = r.error or r.attempt_error or self._error or NoAnswer(wait_s)
            since = self._failing_since or r.started
            return Reading(self._record, False, self._seen_at, error, since, not r.done.is_set())

    def _run(self, r: _Read) -> None:
        def note(err: BaseException) -> None:
            if isinstance(err, RemoteError):
                r.attempt_error = err

        try:
            with retry.reporting(note):
                rec = self._fetch()
        except RemoteError as e:
            self._ended(r, error=e)
        except Exception as e:  # a bug must not leave every later question waiting on this read
            log.exception("status read failed")
            self._ended(r, error=RemoteError(f"status read failed: {type(e).__name__}: {e}"))
        else:
            self._ended(r, record=rec)

    def _ended(self, r: _Read, record: Any = None, error: RemoteError | None = None) -> None:
        with self._lock:
            if error is None:
                self._record, self._seen_at = record, self.clock()
                self._error = self._failing_since = None
            else:
                self._error = r.error = error
                self._failing_since = self._failing_since or r.started
            self._read = None
            self._save()
            r.done.set()

    # -- the file --------------------------------------------------------------------------

    def _load(self) -> tuple[Any, dt.datetime | None, dt.datetime | None]:
        if not self.path:
            return None, None, None
        try:
            with open(self.path, encoding="utf-8") as f:
                d = json.load(f)
            rec = self._parse(d["record"]) if d.get("record") else None
            return rec, parse_iso(d.get("seen_at")), parse_iso(d.get("failing_since"))
        except FileNotFoundError:
            return None, None, None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, StatusError) as e:
            log.warning("last status record %s unreadable (%s); starting without one", self.path, e)
            return None, None, None

    def _save(self) -> None:
        if not self.path:
            return
        d = {
            "seen_at": _iso(self._seen_at),
            "record": self._record.to_dict() if self._record else None,
            "failing_since": _iso(self._failing_since),
        }
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            write_atomic(self.path, json.dumps(d))
        except OSError as e:  # an answer must not fail for want of a cache
            log.warning("cannot write the last status record %s: %s", self.path, e)


def _iso(t: dt.datetime | None) -> str | None:
    if t is None:
        return None
    return t.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def kind_live(box, kind: str, path: str = "", clock: Callable[[], dt.datetime] | None = None) -> LiveStatus:
    """The bounded read of a kind's status (runner.contract.kinds: ``GpuBox.record(kind)``, kept
    and read back typed as the table says)."""
    return LiveStatus(box, path, clock, read=functools.partial(box.record, kind), parse=KINDS[kind].record)
