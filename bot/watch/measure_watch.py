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

import copy
import datetime as dt

from bot.slack.slack_out import Action
from bot.verbs.table import MEASURING
from bot.watch.posted import MAX_KEYS, Posted
from runner.contract.measure import MeasureRecord
from runner.contract.status import age_s
from runner.text.human import human_duration
from runner.text.measure import render_measure, setting_line

KEY = MEASURING.key


def _post(kind: str, head: str, rec: MeasureRecord, now: dt.datetime, key: str, why: str = "",
          tail: str = "", **kw) -> Action:  # fmt: skip
    """The channel's text without paths, the box's words or the serve command; the operators'
    with them (``why`` after the head), when they differ."""
    text = f"{head}\n{render_measure(rec, now, full=False)}{tail}"
    private = f"{head}{why}\n{render_measure(rec, now)}{tail}"
    return Action(kind, text, key=key, private=private if private != text else "", **kw)


def _measured(rec: MeasureRecord) -> list[dict]:
    """The settings whose every prompt is measured (the target alone's among them)."""
    per = rec.total // max(1, len(rec.settings)) if rec.settings else 0
    return [s for s in rec.settings if per and s.get("requests", 0) >= per]


def _stalled(rec: MeasureRecord, stall_s: float, now: dt.datetime) -> tuple[str, str] | None:
    if rec.phase != "measuring":
        return None
    quiet = age_s(rec.heartbeat, now)  # written with each request's line
    if quiet is None or quiet <= stall_s:
        return None
    head = (
        f":warning: Measurement STALLED: no request finished for {human_duration(quiet)} "
        f"at {rec.setting or '?'} ({rec.done:,} / {rec.total:,})"
    )
    return f"{KEY}stalled:{rec.started_at}:{rec.done}", head


def judge(st, rec: MeasureRecord, now: dt.datetime | None = None, stall_s: float = 300.0):
    """Pure: the watcher's state (the measurement's part) and one record → what to post, next state."""
    now = now or dt.datetime.now(dt.timezone.utc)
    st = copy.deepcopy(st)
    if not rec.started_at:
        return [], st
    p = st.kinds.setdefault(MEASURING.name, Posted())
    run = rec.started_at
    found: list[Action] = []
    if rec.phase in ("crashed", "failed"):
        episode = rec.pid if rec.phase == "crashed" else rec.ended_at
        head = f":rotating_light: Measurement {rec.phase.upper()}"
        found.append(_post("alert", head, rec, now, f"{KEY}{rec.phase}:{run}:{episode}",
                           why=f": {rec.reason or 'no reason given'}", resume=True))  # fmt: skip
    if rec.restarts:
        head = f":warning: Measurement's server restarted ({rec.restarts} so far)"
        found.append(_post("alert", head, rec, now, f"{KEY}restarts:{run}:{rec.restarts}"))
    if stalled := _stalled(rec, stall_s, now):
        tail = (
            "\nthe supervisor still runs, so `/measure resume` is refused; if it stays silent: "
            "`/measure stop`, then `/measure resume` (finished requests are kept)"
        )
        found.append(_post("alert", stalled[1], rec, now, stalled[0], tail=tail))
    for s in _measured(rec) if rec.phase != "done" else []:  # done names every setting
        head = f":bar_chart: Measured {setting_line(s)}"
        found.append(Action("milestone", head, key=f"{KEY}setting:{run}:{s.get('setting')}"))
    if rec.phase == "done":
        found.append(_post("done", ":white_check_mark: Measurement done", rec, now, f"{KEY}done:{run}"))
    out = [a for a in found if a.key not in p.active]
    p.active = (p.active + [a.key for a in out])[-MAX_KEYS:]
    return out, st
