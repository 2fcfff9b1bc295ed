"""The training's verbs (`/train VERB`, `hsx train VERB`): each mutating one is the fixed
``hsx-runner train VERB`` (remote.client.GpuBox.call), `status` the record, `chart` draws
``train history``. handlers.py gates, confirms,
audits and dispatches them (``RUN``), as it does the extraction's.

The record is read through ``Handlers.lives["train"]`` (remote/live.py), so an answer comes within the
status bound whatever the box does. Paths and the trainer's own words are for operators: a
member's text says whom to ask instead (``WITHHELD``), the reason ``logs`` is operators' only."""

from __future__ import annotations

import functools

from bot.render import summary
from bot.verbs.audit import ask_operators, for_member
from bot.verbs.commands import Command, Reply
from bot.verbs.table import TRAINING
from runner.text.training import render_train

OFFER = "after-extraction"  # what the box offers a start refused while the extraction runs


def act(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """A mutating verb: ``hsx-runner train VERB``; a start refused during the extraction offers
    to start at its end (a confirmation of `train after-extraction`)."""
    reply = h.act(cmd, user, lambda: h.box.call("train", cmd.verb))
    if reply.extra.get("reply", {}).get("offer") == OFFER:
        offer = Command(OFFER, kind=TRAINING.name)
        return Reply(text=f"{reply.text}\n{offer.row.question}", audit=reply.audit, ephemeral=True,
                     confirm=offer.name)  # fmt: skip
    return reply


def status(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """`/train status`: the record, or the last one seen marked stale when the box is slow."""
    full = h.allowed(user, operator)
    r = h.lives["train"].read()
    if not r.fresh:
        text, markup = for_member(summary.render_train_reading(r, full=full), full, h.cfg.slack.operators)
        return Reply(text=text, markup=markup, ephemeral=True, error=True)
    ask = "" if full else ask_operators(h.cfg.slack.operators)
    text, markup = for_member(render_train(r.record, full=full), full, h.cfg.slack.operators)
    blocks = summary.train_blocks(r.record, full=full, ask=ask)
    return Reply(text=text, markup=markup, blocks=blocks, extra={"train": r.record})


def chart(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """The history's loss and acc over the steps, the evals, each crash and resume, as a PNG."""
    from bot.render import train_chart

    need = "training history yet (need two logged steps)"
    return h.chart(
        h.box.train_history,
        functools.partial(h.box.record, "train"),
        train_chart.story,
        train_chart,
        need,
        "hsx-train-chart.png",
    )


RUN = {"status": status, "chart": chart} | {
    v.name: act
    for v in TRAINING.verbs
    if v.operator  # each one `hsx-runner train VERB`
}
