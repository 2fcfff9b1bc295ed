"""The watcher's ticks, counted as its scheduler ends them: a test that asserts nothing more was
posted waits for ticks that would have posted it, never for a time that may hold none."""

from __future__ import annotations

import threading

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED


class Ticks:
    def __init__(self, scheduler):
        self._n = 0
        self._cv = threading.Condition()
        scheduler.add_listener(self._ended, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)

    def _ended(self, _event) -> None:
        with self._cv:
            self._n += 1
            self._cv.notify_all()

    def wait(self, n: int, timeout: float = 60.0) -> None:
        """Until ``n`` more ticks have ended (a tick skipped while one runs is not counted)."""
        with self._cv:
            goal = self._n + n
            assert self._cv.wait_for(lambda: self._n >= goal, timeout), (
                f"the watcher ended {goal - self._n} ticks short"
            )
