"""The regeneration's verbs (`/regenerate VERB`, `hsx regenerate VERB`): each mutating one is the
fixed ``hsx-runner regenerate VERB`` (remote.client.GpuBox.call), `status` the record
(runner/text/regenerate.py), `chart` its progress points drawn (bot/render/regenerate_chart.py).
handlers.py gates, confirms, audits and dispatches them (``RUN``), as it does the other kinds'.

The record is read through ``Handlers.lives["regenerate"]`` (remote/live.py), so an answer comes within
the status bound whatever the box does. Paths and the box's words (the last row that failed, why
the server died) are for operators: a member's text leaves them out, or says whom to ask
(``WITHHELD``)."""

from __future__ import annotations

from bot.verbs import kind
from bot.verbs.commands import Command, Reply, failed
from bot.verbs.table import REGENERATING
from remote.errors import RemoteError
from runner.text.regenerate import render_regenerate

VERBS = kind.Verbs(REGENERATING, "regeneration", "regenerate", render_regenerate)
act, reading, status = VERBS.act, VERBS.reading, VERBS.status


def chart(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """Rows done and tokens/s over time as a PNG, from the progress points the status carries."""
    from bot.render import regenerate_chart

    try:
        rec, history = h.box.regenerate_history()
    except RemoteError as e:
        return failed(e)
    told = regenerate_chart.story(history, rec)
    if len(told.points) < 2:
        return Reply(text="chart: not enough regenerated yet (need two progress points)", ephemeral=True)
    return Reply(
        text=regenerate_chart.caption(told),
        image=regenerate_chart.render_png(told),
        image_name="hsx-regenerate-chart.png",
    )


RUN = VERBS.run(chart=chart)
