"""The draft's measurement's verbs (`/measure VERB`, `hsx measure VERB`): each mutating one is the
fixed ``hsx-runner measure VERB`` (remote.client.GpuBox.measure), `status` the record
(runner/text/measure.py). handlers.py gates, confirms, audits and dispatches them (``RUN``), as it
does the other kinds'. Paths, the box's words and the serve command are for operators: a member's
text says whom to ask instead (``WITHHELD``)."""

from __future__ import annotations

from bot.render.mrkdwn import escape
from bot.verbs.audit import ask_operators
from bot.verbs.commands import Command, Reply, failed
from bot.verbs.table import MEASURING
from remote.errors import RemoteError
from runner.text.measure import render_measure
from runner.text.training import WITHHELD


def act(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """A mutating verb: ``hsx-runner measure VERB``, audited before and after."""
    return h.act(cmd, user, lambda: h.box.measure(cmd.verb))


def status(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """`/measure status`: the record as text; a member's names whom to ask for the details."""
    full = h.allowed(user, operator)
    try:
        rec = h.box.measure_status()
    except RemoteError as e:
        return failed(e)
    text = render_measure(rec, full=full)
    if full or WITHHELD not in text:
        return Reply(text=text, extra={"measure": rec})
    said = escape(text).replace(WITHHELD, ask_operators(h.cfg.slack.operators))
    return Reply(text=said, markup=True, extra={"measure": rec})  # it carries mentions


RUN = {"status": status} | {
    v.name: act
    for v in MEASURING.verbs
    if v.operator  # each one `hsx-runner measure VERB`
}
