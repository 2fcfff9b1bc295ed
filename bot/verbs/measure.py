"""The draft's measurement's verbs (`/measure VERB`, `hsx measure VERB`): each mutating one is the
fixed ``hsx-runner measure VERB`` (remote.client.GpuBox.call), `status` the record
(runner/text/measure.py), `chart` its figures drawn (bot/render/measure_chart.py). handlers.py gates, confirms, audits and
dispatches them (``RUN``), as it does the other kinds'.

The record is read through ``Handlers.lives["measure"]`` (remote/live.py), so an answer comes within
the status bound whatever the box does. Paths, the box's words and the serve command are for
operators: a member's text says whom to ask instead (``WITHHELD``)."""

from __future__ import annotations

from bot.verbs import kind
from bot.verbs.commands import Command, Reply, failed
from bot.verbs.table import MEASURING
from remote.errors import RemoteError
from runner.text.measure import render_measure

VERBS = kind.Verbs(MEASURING, "measurement", "measure", render_measure)
act, reading, status = VERBS.act, VERBS.reading, VERBS.status


def chart(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """The measurement's figures as a PNG: accept length per setting beside the simulated one,
    the histograms, tokens/s with and without the draft."""
    from bot.render import measure_chart

    try:
        rec = h.box.record("measure")
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


RUN = VERBS.run(chart=chart)
