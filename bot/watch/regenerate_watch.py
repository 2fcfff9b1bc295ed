"""The watcher's judging of the regeneration (``hsx-runner regenerate status``), apart from the
other kinds'.

Alerts, each posted once per episode:
- a crash (the supervisor gone: one per launch, by its pid) or a failure (the restart cap spent,
  too many rows failing in a row), with the reason for operators and a Resume button that runs
  `/regenerate resume`: committed rows are kept;
- on Slurm, each rank that fails, is cancelled, times out or vanishes, at once, once per rank and
  task, with a Resume button (resume submits that rank while the others run on); the run's own
  failure is then its ranks' alerts, as the extraction's;
- a server restart (why it died, for operators);
- silence: regenerating, and no row committed for ``[watcher] stall_after_s`` (the record's
  heartbeat is written as rows commit). The supervisor holds the run, so the alert says
  "`/regenerate stop`, then `/regenerate resume`" and carries no button.
Milestones, in the progress message's thread: 25, 50 and 75% of the rows, each once per run; done
with the rows regenerated and not, and, for operators, the new dataset's path and the list of the
rows not regenerated.
"""

from __future__ import annotations

import copy
import datetime as dt

from bot.slack.slack_out import Action
from bot.verbs.table import REGENERATING
from bot.watch.posted import MAX_KEYS, Posted, look
from runner.contract.ranks import ALERTING
from runner.contract.regenerate import RegenerateRecord
from runner.contract.status import age_s
from runner.text.human import human_duration
from runner.text.regenerate import render_regenerate

KEY = REGENERATING.key
MILESTONE_PCT = 25  # 25, 50, 75; done says the 100


def _post(kind: str, head: str, rec: RegenerateRecord, now: dt.datetime, key: str, why: str = "",
          tail: str = "", **kw) -> Action:  # fmt: skip
    """The channel's text without paths or the box's words; the operators' with them (``why``
    after the head), when they differ."""
    text = f"{head}\n{render_regenerate(rec, now, full=False)}{tail}"
    private = f"{head}{why}\n{render_regenerate(rec, now)}{tail}"
    return Action(kind, text, key=key, private=private if private != text else "", **kw)


def _stalled(rec: RegenerateRecord, stall_s: float, now: dt.datetime) -> tuple[str, str] | None:
    if rec.phase != "regenerating":
        return None
    quiet = age_s(rec.heartbeat, now)  # written as rows commit
    if quiet is None or quiet <= stall_s:
        return None
    head = (
        f":warning: Regeneration STALLED: no row committed for {human_duration(quiet)} "
        f"({rec.done:,} / {rec.total:,} rows)"
    )
    return f"{KEY}stalled:{rec.started_at}:{rec.done}", head


def judge(st, rec: RegenerateRecord, now: dt.datetime | None = None, stall_s: float = 300.0):
    """Pure: the watcher's state (the regeneration's part) and one record → what to post, next state."""
    now = now or dt.datetime.now(dt.timezone.utc)
    st = copy.deepcopy(st)
    if not rec.started_at:
        return [], st
    p = st.kinds.setdefault(REGENERATING.name, Posted())
    run = rec.started_at  # kept by a resume: the run's milestones are said once
    p.start(run)
    found: list[Action] = []
    bad = [r for r in rec.ranks or [] if r.state in ALERTING]
    for r in bad:  # on Slurm: said when it happens, not when the last rank ends
        where = f" (node {r.node})" if r.node else ""
        found.append(_post("alert", f":rotating_light: Regeneration rank {r.rank} {r.word()}{where}", rec, now,
                           f"{KEY}rank:{run}:{r.rank}:{r.job}:{r.state.value}",
                           why=f": {r.reason or 'its supervisor said nothing'}", resume=True))  # fmt: skip
    if rec.phase in ("crashed", "failed") and not bad:
        episode = rec.pid if rec.phase == "crashed" else rec.ended_at
        head = f":rotating_light: Regeneration {rec.phase.upper()}"
        found.append(_post("alert", head, rec, now, f"{KEY}{rec.phase}:{run}:{episode}",
                           why=f": {rec.reason or 'no reason given'}", resume=True))  # fmt: skip
    if rec.restarts:
        head = f":warning: Regeneration's server restarted ({rec.restarts} so far)"
        found.append(_post("alert", head, rec, now, f"{KEY}restarts:{run}:{rec.restarts}"))
    if stalled := _stalled(rec, stall_s, now):
        tail = (
            "\nthe supervisor still runs, so `/regenerate resume` is refused; if it stays silent: "
            "`/regenerate stop`, then `/regenerate resume` (committed rows are kept)"
        )
        found.append(_post("alert", stalled[1], rec, now, stalled[0], tail=tail))
    later = []
    if rec.phase != "done" and rec.total and (reached := p.reached(rec.done, rec.total, MILESTONE_PCT)):
        head = f"Regeneration {reached}% reached"
        later.append(_post("milestone", head, rec, now, f"{KEY}milestone:{run}:{reached}"))
    if rec.phase == "done":
        head = (
            f":white_check_mark: Regeneration done: {rec.done - rec.failed:,} rows regenerated, "
            f"{rec.failed:,} not"
        )
        found.append(_post("done", head, rec, now, f"{KEY}done:{run}"))
    out = [a for a in found if a.key not in p.active]
    p.active = (p.active + [a.key for a in out])[-MAX_KEYS:]
    return out + later, st


def watch_regenerating(box, st, now: dt.datetime | None = None, stall_s: float = 300.0):
    return look(box.regenerate_status, judge, st, now, "regeneration", stall_s=stall_s)
