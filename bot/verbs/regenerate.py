"""The regeneration's verbs (`/regenerate VERB`, `hsx regenerate VERB`): each mutating one is the
fixed ``hsx-runner regenerate VERB`` (remote.client.GpuBox.regenerate), `status` the record
(runner/text/regenerate.py), `chart` its progress points drawn (bot/render/regenerate_chart.py).
handlers.py gates, confirms, audits and dispatches them (``RUN``), as it does the other kinds'.

The record is read through ``Handlers.regenerate_live`` (remote/live.py), so an answer comes within
the status bound whatever the box does. Paths and the box's words (the last row that failed, why
the server died) are for operators: a member's text leaves them out, or says whom to ask
(``WITHHELD``)."""

from __future__ import annotations

from bot.render import summary
from bot.verbs.audit import for_member
from bot.verbs.commands import Command, Reply, failed
from bot.verbs.table import REGENERATING
from remote.errors import RemoteError
from runner.contract.config import Config
from runner.contract.stages import RegenerateConfig
from runner.text.regenerate import render_regenerate


def wanted(cfg: Config) -> bool:
    """A [regenerate] section in use: a key set to other than its default. "progress?" and the
    watcher follow the regeneration then; `/regenerate` answers whatever the config says."""
    return cfg.regenerate != RegenerateConfig()


def act(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """A mutating verb: ``hsx-runner regenerate VERB``, audited before and after."""
    return h.act(cmd, user, lambda: h.box.regenerate(cmd.verb))


def reading(r, full: bool) -> str:
    """The record read, or the last one seen marked stale when the box is slow."""
    if r.fresh:
        return render_regenerate(r.record, full=full)
    return summary.render_kind_reading(r, "regeneration", "regenerate status", render_regenerate, full=full)


def status(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """`/regenerate status`: the record; a member's without the paths and the box's words."""
    full = h.allowed(user, operator)
    r = h.regenerate_live.read()
    text, markup = for_member(reading(r, full), full, h.cfg.slack.operators)
    if not r.fresh:
        return Reply(text=text, markup=markup, ephemeral=True, error=True)
    return Reply(text=text, markup=markup, extra={"regenerate": r.record})


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


RUN = {"status": status, "chart": chart} | {
    v.name: act
    for v in REGENERATING.verbs
    if v.operator  # each one `hsx-runner regenerate VERB`
}
