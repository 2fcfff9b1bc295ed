"""The watcher's judging of the draft's measurement (``hsx-runner measure status``), apart from
the other kinds'.

Alerts, each posted once per episode:
- a crash (the supervisor gone: one per launch, by its pid) or a failure (the restart cap spent,
  a request that failed), with the reason for operators and a Resume button that runs
  `/measure resume`: finished requests are kept;
- a server restart (which rank died, from its log);
- silence: measuring, and no request finished for ``[watcher] stall_after_s``. The supervisor
  holds the run, so the alert says "`/measure stop`, then `/measure resume`" and carries no button.
Milestones, in the progress message's thread: each setting measured, with its figures; done with
the measured accept length beside the simulated one (SGLang's units both), tokens/s with and
without the draft, and, for operators, the serve command that was run.
"""

from __future__ import annotations

import datetime as dt
import functools

from bot.verbs.table import MEASURING
from bot.watch import supervised
from bot.watch.action import Action
from runner.contract.measure import MeasureRecord
from runner.text.measure import render_measure, setting_line

KEY = MEASURING.key

_post = functools.partial(supervised.post, render_measure)  # the serve command for operators only


def _measured(rec: MeasureRecord) -> list[dict]:
    """The settings whose every prompt is measured (the target alone's among them)."""
    per = rec.total // max(1, len(rec.settings)) if rec.settings else 0
    return [s for s in rec.settings if per and s.get("requests", 0) >= per]


def _stalled(rec: MeasureRecord, stall_s: float, now: dt.datetime) -> tuple[str, str] | None:
    where = f" at {rec.setting or '?'} ({rec.done:,} / {rec.total:,})"  # its heartbeat: each request's line
    return supervised.stalled(MEASURING, rec, "measuring", stall_s, now, "no request finished", where)


def judge(st, rec: MeasureRecord, now: dt.datetime | None = None, stall_s: float = 300.0):
    """Pure: the watcher's state (the measurement's part) and one record → what to post, next state."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return supervised.judged(MEASURING, st, rec.started_at, lambda p: (_found(rec, now, stall_s), []))


def _found(rec: MeasureRecord, now: dt.datetime, stall_s: float) -> list[Action]:
    run = rec.started_at
    found = supervised.alerts(
        MEASURING, rec, now, _post, _stalled(rec, stall_s, now), "finished requests are kept"
    )
    for s in _measured(rec) if rec.phase != "done" else []:  # done names every setting
        head = f":bar_chart: Measured {setting_line(s)}"
        found.append(Action("milestone", head, key=f"{KEY}setting:{run}:{s.get('setting')}"))
    if rec.phase == "done":
        found.append(_post("done", ":white_check_mark: Measurement done", rec, now, f"{KEY}done:{run}"))
    return found
