"""The training's verbs (`/train VERB`, `hsx train VERB`): each mutating one is the fixed
``hsx-runner train VERB`` (remote.client.GpuBox.train), `status` the record, `chart` draws
``train history``; and the training's lines in "progress?". handlers.py gates, confirms,
audits and dispatches them (``RUN``), as it does the extraction's.

The record is read through ``Handlers.train_live`` (remote/live.py), so an answer comes within the
status bound whatever the box does. Paths and the trainer's own words are for operators: a
member's text says whom to ask instead (``WITHHELD``), the reason ``logs`` is operators' only."""

from __future__ import annotations

import time

from bot.render import summary
from bot.render.mrkdwn import escape
from bot.verbs.audit import ask_operators
from bot.verbs.commands import Command, Reply
from bot.verbs.table import TRAINING
from runner.contract import timing
from runner.text.training import WITHHELD, render_train

OFFER = "after-extraction"  # what the box offers a start refused while the extraction runs


def act(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """A mutating verb: ``hsx-runner train VERB``; a start refused during the extraction offers
    to start at its end (a confirmation of `train after-extraction`)."""
    reply = h.act(cmd, user, lambda: h.box.train(cmd.verb))
    if reply.extra.get("reply", {}).get("offer") == OFFER:
        offer = Command(OFFER, kind=TRAINING.name)
        return Reply(text=f"{reply.text}\n{offer.row.question}", audit=reply.audit, ephemeral=True,
                     confirm=offer.name)  # fmt: skip
    return reply


def _said(h, text: str, full: bool) -> tuple[str, bool]:
    """(text, markup): a member's text naming whom to ask is escaped here, as it carries mentions."""
    if full or WITHHELD not in text:
        return text, False
    return escape(text).replace(WITHHELD, ask_operators(h.cfg.slack.operators)), True


def status(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """`/train status`: the record, or the last one seen marked stale when the box is slow."""
    full = h.allowed(user, operator)
    r = h.train_live.read()
    if not r.fresh:
        text, markup = _said(h, summary.render_train_reading(r, full=full), full)
        return Reply(text=text, markup=markup, ephemeral=True, error=True)
    ask = "" if full else ask_operators(h.cfg.slack.operators)
    text, markup = _said(h, render_train(r.record, full=full), full)
    blocks = summary.train_blocks(r.record, full=full, ask=ask)
    return Reply(text=text, markup=markup, blocks=blocks, extra={"train": r.record})


def chart(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """The history's loss and acc over the steps, the evals, each crash and resume, as a PNG."""
    from bot.render import train_chart

    need = "training history yet (need two logged steps)"
    return h.chart(
        h.box.train_history, h.box.train_status, train_chart.story, train_chart, need, "hsx-train-chart.png"
    )


def progress(h, user: str, operator: bool | None = None) -> Reply:
    """ "progress?": the extraction's answer and, with a `[train]` section, the training's once a
    run has started (the last record seen, marked stale, when the box is slow). The training's
    read starts first and shares the extraction's wait: one answer bound for both."""
    if not h.cfg.train.python:
        return h.handle(Command("status"), user, operator)
    t0 = time.monotonic()
    kicked = h.train_live.kick()
    reply = h.handle(Command("status"), user, operator)
    r = h.train_live.read(max(0.0, timing.current().status_answer_s - (time.monotonic() - t0)), kicked)
    if r.record is not None and not r.record.started and not r.record.building:
        return reply
    full = h.allowed(user, operator)
    ask = "" if full else ask_operators(h.cfg.slack.operators)
    if r.fresh:
        said, blocks = render_train(r.record, full=full), summary.train_blocks(r.record, full=full, ask=ask)
    else:
        said, blocks = summary.render_train_reading(r, full=full), None
    text, markup = _said(h, f"{reply.text}\n\n{said}", full)
    if reply.blocks:
        blocks = reply.blocks + (blocks or [summary.asking(b, ask) for b in summary.text_blocks(said)])
    return Reply(text=text, blocks=blocks if reply.blocks else None, markup=markup, ephemeral=reply.ephemeral,
                 error=reply.error, extra={**reply.extra, "train": r.record})  # fmt: skip


RUN = {"status": status, "chart": chart} | {
    v.name: act
    for v in TRAINING.verbs
    if v.operator  # each one `hsx-runner train VERB`
}
