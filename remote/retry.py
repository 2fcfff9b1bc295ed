"""The one retry policy for reaching the GPU box.

Bounded by attempts and by total time; retries only errors marked ``transient`` (a hop
unreachable: refused, reset, timed out, EOF), never auth or host-key failures. Each retry is
reported to a hook as a ``RetryRecord`` so the bot can say "jump host unreachable, retry 3/5".
The waits come from ``runner.contract.timing`` (``HSX_TIMING=fast`` shrinks them for tests).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
    wait_random,
)

from runner.contract import timing

from .errors import RemoteError

log = logging.getLogger(__name__)
T = TypeVar("T")

ATTEMPTS = 5
TOTAL_S = 60.0  # no attempt starts after this much time
_local = threading.local()


@dataclass(frozen=True)
class RetryRecord:
    """One failed attempt that will be retried."""

    attempt: int  # the attempt that failed, 1-based
    attempts: int  # the bound
    error: str  # the error's message
    kind: str  # the error's class name: Unreachable, ...
    hop: str | None  # "jump" / "target" when the error names one
    wait_s: float  # before the next attempt
    elapsed_s: float  # since the first attempt began

    def __str__(self) -> str:
        return f"{self.error}; retry {self.attempt + 1}/{self.attempts} in {self.wait_s:.1f}s"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@contextlib.contextmanager
def reporting(hook: Callable[[BaseException], None]):
    """Hand each failed attempt's error to hook as well, for calls this thread makes in the block
    (remote.live says what is wrong while a read still retries)."""
    _local.hook = hook
    try:
        yield
    finally:
        _local.hook = None


def is_transient(e: BaseException) -> bool:
    return isinstance(e, RemoteError) and bool(getattr(e, "transient", False))


def call(
    fn: Callable[[], T],
    on_retry: Callable[[RetryRecord], None] | None = None,
    attempts: int = ATTEMPTS,
    total_s: float = TOTAL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run fn under the policy; the last error is raised as itself when retries run out."""
    if attempts < 1 or total_s <= 0:
        raise ValueError("retry: attempts must be >= 1 and total_s > 0")
    t = timing.current()
    wait = wait_exponential(multiplier=t.retry_first_wait_s, max=t.retry_max_wait_s) + wait_random(
        0, t.retry_jitter_s
    )

    def report(state: RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome else None
        rec = RetryRecord(
            attempt=state.attempt_number,
            attempts=attempts,
            error=str(err),
            kind=type(err).__name__,
            hop=getattr(err, "hop", None),
            wait_s=state.next_action.sleep if state.next_action else 0.0,
            elapsed_s=round(state.seconds_since_start or 0.0, 3),
        )
        log.warning("remote retry: %s", rec)
        if on_retry is not None:
            on_retry(rec)
        hook = getattr(_local, "hook", None)
        if hook is not None and err is not None:
            hook(err)

    retrying = Retrying(
        stop=stop_after_attempt(attempts) | stop_before_delay(total_s),
        wait=wait,
        retry=retry_if_exception(is_transient),
        before_sleep=report,
        sleep=sleep,
        reraise=True,
    )
    return retrying(fn)
