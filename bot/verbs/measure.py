"""The draft's measurement's verbs (`/measure VERB`, `hsx measure VERB`): each mutating one is the
fixed ``hsx-runner measure VERB`` (remote.client.GpuBox.measure), `status` the record
(runner/text/measure.py), `chart` its figures drawn (bot/render/measure_chart.py). handlers.py gates, confirms, audits and
dispatches them (``RUN``), as it does the other kinds'.

The record is read through ``Handlers.measure_live`` (remote/live.py), so an answer comes within
the status bound whatever the box does. Paths, the box's words and the serve command are for
operators: a member's text says whom to ask instead (``WITHHELD``)."""

from __future__ import annotations

from bot.render import summary
from bot.verbs.audit import for_member
from bot.verbs.commands import Command, Reply, failed
from bot.verbs.table import MEASURING
from remote.errors import RemoteError
from runner.contract.config import Config
from runner.text.measure import render_measure


def wanted(cfg: Config) -> bool:
    """A draft to measure: one trained here ([train]), or one named ([measure] draft)."""
    return bool(cfg.train.python or cfg.measure.draft)


def act(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """A mutating verb: ``hsx-runner measure VERB``, audited before and after."""
    return h.act(cmd, user, lambda: h.box.measure(cmd.verb))


def reading(r, full: bool) -> str:
    """The record read, or the last one seen marked stale when the box is slow."""
    if r.fresh:
        return render_measure(r.record, full=full)
    return summary.render_kind_reading(r, "measurement", "measure status", render_measure, full=full)


def status(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """`/measure status`: the record; a member's names whom to ask for the details."""
    full = h.allowed(user, operator)
    r = h.measure_live.read()
    text, markup = for_member(reading(r, full), full, h.cfg.slack.operators)
    if not r.fresh:
        return Reply(text=text, markup=markup, ephemeral=True, error=True)
    return Reply(text=text, markup=markup, extra={"measure": r.record})


def chart(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """The measurement's figures as a PNG: accept length per setting beside the simulated one,
    the histograms, tokens/s with and without the draft."""
    from bot.render import measure_chart

    try:
        rec = h.box.measure_status()
    except RemoteError as e:
        return failed(e)
    if not measure_chart.enough(rec):
        return Reply(
            text="chart: not enough measured yet (need a setting with the draft measured)", ephemeral=True
        )
    return Reply(
        text=measure_chart.caption(rec),
        image=measure_chart.render_png(rec),
        image_name="hsx-measure-chart.png",
    )


RUN = {"status": status, "chart": chart} | {
    v.name: act
    for v in MEASURING.verbs
    if v.operator  # each one `hsx-runner measure VERB`
}
