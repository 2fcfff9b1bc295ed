"""Block Kit for Slack: the plain-text summary (runner/text/extraction.py) with a progress
bar and a context line, and what to say when the GPU box could not be asked. The blocks'
text is escaped here (it carries the box's words); the plain-text answers are escaped where
they go to Slack (slack_out, the watcher), since a terminal shows them too."""

from __future__ import annotations

import datetime as dt

from bot.render.mrkdwn import escape
from remote.errors import (
    AuthFailed,
    BadReply,
    BrokenFile,
    CommandFailed,
    CommandTimeout,
    HostKeyMismatch,
    NoAnswer,
    RemoteError,
    Unreachable,
)
from remote.live import Reading
from runner.contract.status import STALE_S, Phase, StatusRecord, heartbeat_age
from runner.contract.train import TrainRecord, done_fraction
from runner.text.extraction import MAX_ERROR_CHARS, percent, render_text
from runner.text.human import clock, human_duration, now_utc
from runner.text.training import WITHHELD, render_train

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
    return {"type": "section", "text": {"type": "mrkdwn", "text": escape(text, 2900)}}


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
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": escape(context.strip(), 2900)}]}
    )
    return blocks


def render_error(
    err: RemoteError,
    unreachable_since: dt.datetime | None = None,
    retry_s: float | None = None,
    now: dt.datetime | None = None,
) -> str:
    """What to say when the GPU box could not be asked: which hop, and what happens next."""
    now = now_utc(now)
    lines = [error_head(err)]
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


def error_head(err: RemoteError) -> str:
    """One line: what went wrong reaching the box, and at which hop."""
    if isinstance(err, Unreachable):
        return f"GPU box unreachable — hop: {err.hop}: {err.detail}"
    if isinstance(err, AuthFailed):
        return f"GPU box refused our key — hop: {err.hop}: {err.detail}"
    if isinstance(err, HostKeyMismatch):
        return f"Host key refused — hop: {err.hop} ({err.host}), fingerprint {err.fingerprint}; not trusted automatically"
    if isinstance(err, CommandTimeout):
        return f"The GPU box did not answer within {err.timeout_s:g}s"
    if isinstance(err, CommandFailed):
        return f"hsx-runner failed on the GPU box (exit {err.code}): {err.stderr_tail[-MAX_ERROR_CHARS:] or 'no output'}"
    if isinstance(err, BrokenFile):  # the box is there: a file on it needs a person
        return (
            f"The GPU box answered, but its {err.file or 'record'} is broken: {err.reason[:MAX_ERROR_CHARS]}"
        )
    if isinstance(err, BadReply):
        return f"The GPU box answered something unreadable: {str(err)[:MAX_ERROR_CHARS]}"
    if isinstance(err, NoAnswer):
        return f"No reply from the GPU box within {err.waited_s:g}s (a connection or a command still waits on it)"
    return f"Cannot reach the GPU box: {str(err)[:MAX_ERROR_CHARS]}"


def render_error_blocks(err: RemoteError, **kw) -> list[dict]:
    return [_section(":warning: " + render_error(err, **kw))]


def render_reading(r: Reading, now: dt.datetime | None = None, stale_s: float = STALE_S) -> str:
    """A status answer without a fresh record: what is wrong and since when, then the last
    record seen, in the contract's words as of when it was read, and how old it is."""
    now = now_utc(now)
    err = r.error
    if err is None or err.transient:  # the box may come back by itself: say so and keep trying
        head = "GPU box not answering"
        if r.failing_since is not None:
            age = (now - r.failing_since).total_seconds()
            head += f" since {clock(r.failing_since, now)} ({human_duration(age)})"
        lines = [head + " — retrying"] + ([error_head(err)] if err is not None else [])
    else:  # a cause to fix first: a key, a host key, the runner itself
        lines = [render_error(err)]
    if r.record is None or r.seen_at is None:
        lines.append("no status seen from this box yet")
    else:
        age = (now - r.seen_at).total_seconds()
        lines.append(f"last seen {clock(r.seen_at, now)} ({human_duration(age)} ago):")
        lines.append(render_text(r.record, r.seen_at, stale_s))
    return "\n".join(lines)


def render_reading_blocks(r: Reading, now: dt.datetime | None = None, stale_s: float = STALE_S) -> list[dict]:
    return [_section(":warning: " + render_reading(r, now, stale_s))]


TRAIN_ICON = {"loading": ":hourglass_flowing_sand:", "training": ":arrows_counterclockwise:",
              "done": ":white_check_mark:", "stopped": ":black_square_for_stop:", "crashed": ":boom:"}  # fmt: skip


def text_blocks(text: str) -> list[dict]:
    return [_section(text)]


def train_blocks(
    rec: TrainRecord, now: dt.datetime | None = None, full: bool = True, ask: str = ""
) -> list[dict]:
    """The training's summary (runner/text/training.py) with a bar of its steps; ``full``: an
    operator's (the run dir named); ``ask``: the mrkdwn that names whom to ask, for ``WITHHELD``."""
    blocks = []
    if rec.total_steps and rec.step is not None:
        filled = int(BAR_CELLS * done_fraction(rec))  # 0..100%, whatever step the record says
        pct = 100.0 * done_fraction(rec)
        blocks.append(_section(f"`{'▓' * filled + '░' * (BAR_CELLS - filled)}` *{pct:.1f}%* trained"))
    blocks.append(asking(_section(render_train(rec, now_utc(now), full)), ask))
    run = f" · run {rec.run_dir or '?'}" if full else ""
    context = f"{TRAIN_ICON.get(rec.phase, ':mag:')} training {rec.phase}{run}"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": escape(context, 2900)}]})
    return blocks


def asking(section: dict, ask: str) -> dict:
    """A section (escaped) naming whom to ask where a member's text withholds something."""
    if ask:
        section["text"]["text"] = section["text"]["text"].replace(WITHHELD, ask)
    return section


def render_kind_reading(r: Reading, word: str, verb: str, render, now: dt.datetime | None = None,
                        full: bool = True) -> str:  # fmt: skip
    """ "progress?" and a kind's status without a fresh record of it (``word``: "training",
    read by ``hsx-runner VERB``): that the box did not answer (an operator also reads why), then
    the last record seen, drawn by ``render(rec, as_of, full)`` and marked stale, as of when it
    was read."""
    now = now_utc(now)
    head = f"{word}: the GPU box has not answered `{verb}`"
    if r.failing_since is not None:
        head += f" since {clock(r.failing_since, now)} ({human_duration((now - r.failing_since).total_seconds())})"
    lines = [head + (" — retrying" if r.error is None or r.error.transient else "")]
    if full and r.error is not None and not isinstance(r.error, NoAnswer):
        lines.append(render_error(r.error))
    if r.record is None or r.seen_at is None:
        lines.append(f"no {word} record seen from this box yet")
    else:
        age = human_duration((now - r.seen_at).total_seconds())
        lines.append(f"last {word} record seen {clock(r.seen_at, now)} ({age} ago), stale:")
        lines.append(render(r.record, r.seen_at, full))
    return "\n".join(lines)


def render_train_reading(r: Reading, now: dt.datetime | None = None, full: bool = True) -> str:
    """`/train status` without a fresh training record (render_reading)."""
    return render_kind_reading(r, "training", "train status", render_train, now, full)
