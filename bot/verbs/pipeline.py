"""The pipeline's verbs (`/pipeline VERB`, `hsx pipeline VERB`): start and stop are the fixed
``hsx-runner pipeline VERB`` (remote.client.GpuBox.call), start also resuming a pipeline that
failed, crashed or was stopped; `status` the pipeline (runner/text/pipeline.py) followed by the
stage under way in its own kind's words. handlers.py gates, confirms, audits and dispatches them
(``RUN``), as it does the other kinds'.

The status reply is read through ``Handlers.lives["pipeline"]`` (remote/live.py), so an answer comes
within the status bound whatever the box does. Paths and the box's words are for operators: a
member's text leaves them out, or says whom to ask (``WITHHELD``)."""

from __future__ import annotations

import datetime as dt

from bot.render import texts
from bot.verbs import kind
from bot.verbs.table import KINDS, PIPELINE
from runner.contract.errors import StatusError
from runner.contract.kinds import KINDS as SPECS
from runner.text.pipeline import render_pipeline

# each stage: its kind (a KINDS name), whose record its status reply is (runner.contract.kinds,
# by the stage's name) and whose own text says it (the extraction's status is everyone's, as
# `/extract status` says it)
STAGES = {k.stage: k.name for k in KINDS.values() if k.stage}
UNREAD = (StatusError, ValueError, TypeError, KeyError, AttributeError)  # a reply not its kind's record


def stage_record(d: dict):
    """The stage under way's (or the one it ended at's) own record, as its kind reads it; None
    when there is none. Raises one of ``UNREAD`` when the reply is not that kind's record."""
    stage, current = d.get("stage"), d.get("current")
    if stage not in STAGES or current is None:
        return None
    return SPECS[stage].record(current)


def stage_text(d: dict, now: dt.datetime | None = None, full: bool = True) -> str:
    """The stage under way (or the one it ended at) as its own kind says it; its phase alone
    when its reply is not that kind's record (the box could not read it)."""
    try:
        rec = stage_record(d)
        return "" if rec is None else texts.text(STAGES[d["stage"]], rec, now, full)
    except UNREAD:
        stage, current = d.get("stage"), d.get("current") or {}
        phase = (d.get("phases") or {}).get(stage) or current.get("phase") or "?"
        return f"{stage}: {phase}"


def render(d: dict, now: dt.datetime | None = None, full: bool = True) -> str:
    """`/pipeline status`: the pipeline, then the stage under way in its own words."""
    own = stage_text(d, now, full)
    return render_pipeline(d, full) + (f"\n\n{own}" if own else "")


def brief(d: dict, now: dt.datetime | None = None, full: bool = True) -> str:
    """The pipeline alone, as "progress?" begins: stage k of n, its progress, its ETA."""
    return render_pipeline(d, full)


VERBS = kind.Verbs(PIPELINE, "pipeline", "pipeline", render)
act, status = VERBS.act, VERBS.status


def reading(r, full: bool, each=render) -> str:
    """The reply read, or the last one seen marked stale; progress? draws the pipeline alone
    (``brief``): each kind's own part follows it."""
    return VERBS.reading(r, full, each)


RUN = VERBS.run()
