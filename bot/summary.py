"""Block Kit for Slack: the plain-text summary (runner/contract/render.py) with a progress
bar and a context line, and what to say when the GPU box could not be asked."""

from __future__ import annotations

import datetime as dt

from remote.errors import (
    AuthFailed,
    BadReply,
    CommandFailed,
    CommandTimeout,
    HostKeyMismatch,
    RemoteError,
    Unreachable,
)
from runner.contract.render import MAX_ERROR_CHARS, clock, human_duration, now_utc, percent, render_text
from runner.contract.status import STALE_S, Phase, StatusRecord, heartbeat_age

BAR_CELLS = 20


def progress_bar(rec: StatusRecord, cells: int = BAR_CELLS) -> str:
    filled = int(cells * rec.fraction) if rec.total else 0
    filled = min(filled, cells if rec.done >= rec.total else cells - 1)
    return "▓" * filled + "░" * (cells - filled)


PHASE_ICON = {
    Phase.PREFLIGHT: ":mag:",
    Phase.STARTING_SERVER: ":hourglass_flowing_sand:",
    Phase.SELF_TEST: ":test_tube:",
    Phase.EXTRACTING: ":arrows_counterclockwise:",
    Phase.PAUSED: ":double_vertical_bar:",
    Phase.DONE: ":white_check_mark:",
    Phase.FAILED: ":x:",
    Phase.STOPPED: ":black_square_for_stop:",
    Phase.CRASHED: ":boom:",
}


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}}


def render_blocks(rec: StatusRecord, now: dt.datetime | None = None, stale_s: float = STALE_S) -> list[dict]:
    """Block Kit: progress bar, the summary, and a context line with phase and host."""
    now = now_utc(now)
    text = render_text(rec, now, stale_s)
    blocks = []
    if rec.total:
        blocks.append(_section(f"`{progress_bar(rec)}` *{percent(rec):.1f}%*"))
    blocks.append(_section(text))
    context = (
        f"{PHASE_ICON.get(rec.phase, '')} {rec.phase.value} · job {rec.job or '?'} · host {rec.host or '?'}"
    )
    age = heartbeat_age(rec, now)
    if age is not None:
        context += f" · heartbeat {human_duration(age)} ago"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context.strip()}]})
    return blocks


def render_error(
    err: RemoteError,
    unreachable_since: dt.datetime | None = None,
    retry_s: float | None = None,
    now: dt.datetime | None = None,
) -> str:
    """What to say when the GPU box could not be asked: which hop, and what happens next."""
    now = now_utc(now)
    if isinstance(err, Unreachable):
        head = f"GPU box unreachable — hop: {err.hop}: {err.detail}"
    elif isinstance(err, AuthFailed):
        head = f"GPU box refused our key — hop: {err.hop}: {err.detail}"
    elif isinstance(err, HostKeyMismatch):
        head = f"Host key refused — hop: {err.hop} ({err.host}), fingerprint {err.fingerprint}; not trusted automatically"
    elif isinstance(err, CommandTimeout):
        head = f"The GPU box did not answer within {err.timeout_s:g}s"
    elif isinstance(err, CommandFailed):
        head = f"hsx-runner failed on the GPU box (exit {err.code}): {err.stderr_tail[-MAX_ERROR_CHARS:] or 'no output'}"
    elif isinstance(err, BadReply):
        head = f"The GPU box answered something unreadable: {str(err)[:MAX_ERROR_CHARS]}"
    else:
        head = f"Cannot reach the GPU box: {str(err)[:MAX_ERROR_CHARS]}"
    lines = [head]
    tail = []
    if unreachable_since is not None:
        tail.append(
            f"failing since {clock(unreachable_since, now)} "
            f"({human_duration((now - unreachable_since).total_seconds())})"
        )
    if retry_s is not None and err.transient:
        tail.append(f"retrying every {human_duration(retry_s)}")
    elif err.transient:
        tail.append("transient: the next try may succeed")
    if tail:
        lines.append(" · ".join(tail))
    return "\n".join(lines)


def render_error_blocks(err: RemoteError, **kw) -> list[dict]:
    return [_section(":warning: " + render_error(err, **kw))]
