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

import datetime as dt
import functools

from bot.verbs.table import REGENERATING
from bot.watch import supervised
from bot.watch.posted import Posted
from runner.contract.ranks import ALERTING
from runner.contract.regenerate import RegenerateRecord
from runner.text.regenerate import render_regenerate

KEY = REGENERATING.key
MILESTONE_PCT = 25  # 25, 50, 75; done says the 100

_post = functools.partial(supervised.post, render_regenerate)  # the paths for operators only


def _stalled(rec: RegenerateRecord, stall_s: float, now: dt.datetime) -> tuple[str, str] | None:
    where = f" ({rec.done:,} / {rec.total:,} rows)"  # its heartbeat: written as rows commit
    return supervised.stalled(REGENERATING, rec, "regenerating", stall_s, now, "no row committed", where)


def judge(st, rec: RegenerateRecord, now: dt.datetime | None = None, stall_s: float = 300.0):
    """Pure: the watcher's state (the regeneration's part) and one record → what to post, next state."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return supervised.judged(REGENERATING, st, rec.started_at, lambda p: _found(rec, p, now, stall_s))


def _found(rec: RegenerateRecord, p: Posted, now: dt.datetime, stall_s: float):
    run, found = rec.started_at, []
    bad = [r for r in rec.ranks or [] if r.state in ALERTING]
    for r in bad:  # on Slurm: said when it happens, not when the last rank ends
        where = f" (node {r.node})" if r.node else ""
        found.append(_post("alert", f":rotating_light: Regeneration rank {r.rank} {r.word()}{where}", rec, now,
                           f"{KEY}rank:{run}:{r.rank}:{r.job}:{r.state.value}",
                           why=f": {r.reason or 'its supervisor said nothing'}", resume=True))  # fmt: skip
    found += supervised.alerts(
        REGENERATING, rec, now, _post, _stalled(rec, stall_s, now), "committed rows are kept", ended=not bad
    )
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
    return found, later
