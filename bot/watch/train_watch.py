"""The watcher's judging of the training record (``hsx-runner train status``), apart from the
extraction's.

Alerts, each posted once per episode (a launch of the run, or one quiet stretch):
- a crash, with the reason and a Resume button that runs `/train resume`;
- a NaN loss; loss and acc both 0 over several logs (SpecForge's empty-mask trap);
- silence: still loading after ``[watcher] train_startup_s`` (SpecForge prints nothing while it
  loads the target head and counts the vocab over every feature file), or, once training, no
  step line for STALL_LOGS log times (the record's ``log_s``; ``stall_after_s`` at least, and
  alone while the launch has logged fewer than two). Its end is said when a step comes.
  A silent trainer is alive and holds its run, so `/train resume` would be refused: the alert
  carries no Resume button and says "`/train stop`, then `/train resume`" instead. Stopping loses
  the steps since the last durable checkpoint and may kill a slow save or eval, so a person
  decides it, with the checkpoint step before them.
The channel's text leaves out paths and the trainer's own words (members read it); an alert's and
done's full text goes to each operator by DM (bot/watch/watcher.py).
Milestones, in the progress message's thread: every ``milestone_pct``% of the total steps, each
eval with the best simulated accept length so far, and done with the final metrics and the export path.
What was posted lives in the training's part of the watcher's state (``TrainPosted``), saved each
tick: a restart of the bot posts nothing twice.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
from dataclasses import dataclass, field

from bot.verbs.table import TRAINING
from bot.watch import standing, supervised
from bot.watch.action import Action
from bot.watch.posted import MAX_KEYS, Posted
from runner.contract.config import Config
from runner.contract.status import age_s, parse_iso
from runner.contract.train import EXPORT_PENDING, TrainRecord
from runner.text.human import human_duration
from runner.text.training import eval_line, render_train

ZERO_LOGS = 3  # this many logged steps in a row with loss and acc both 0 is the empty-mask trap
STALL_LOGS = 5  # no step line for this many log times is a stall


@dataclass(frozen=True)
class TrainLimits:
    startup_s: float = 1800.0  # [watcher] train_startup_s: loading this long is said
    stall_floor_s: float = 300.0  # [watcher] stall_after_s: never a stall sooner
    milestone_pct: int = 10

    @classmethod
    def from_config(cls, cfg: Config) -> TrainLimits:
        w = cfg.watcher
        return cls(w.train_startup_s, w.stall_after_s, max(1, w.milestone_pct))


@dataclass
class TrainPosted(Posted):
    """The training's part of the watcher's state: what it posted, and what its judge remembers."""

    zero_steps: list[int] = field(default_factory=list)  # the recent logs with loss and acc 0
    quiet: str = ""  # the silent stretch alerted (its end is said)


def _reason(rec: TrainRecord) -> str:
    """The reason's head: the traceback's last line, without the checkpoint note after it."""
    why = (
        (rec.reason or "no reason given").split("; the last complete checkpoint")[0].split("; no complete")[0]
    )
    return why.split(": ", 1)[1] if why.startswith("the trainer exited with code") and ": " in why else why


def _quiet(rec: TrainRecord, lim: TrainLimits, now: dt.datetime) -> tuple[str, str, str] | None:
    """(key, headline, what to do) when the trainer has been silent too long; the key names the
    stretch."""
    run = f"{rec.run_id}:{rec.launches}"
    if rec.phase == "loading":
        waited = age_s(rec.launched_at, now)
        if waited is None or waited <= lim.startup_s:
            return None
        head = f"still loading the target head and counting the vocab after {human_duration(waited)}"
        return (
            f"{TRAINING.key}loading:{run}",
            f":warning: Training {head}",
            (
                f"past the start-up budget of {human_duration(lim.startup_s)} ([watcher] train_startup_s): "
                "SpecForge prints nothing until its first step, and its vocab pass reads every feature file"
            ),
        )
    if rec.phase != "training" or rec.export == EXPORT_PENDING:  # the end's export logs no step
        return None
    t_step, t_launch = parse_iso(rec.last_step_at), parse_iso(rec.launched_at)
    since = rec.last_step_at if t_step and (t_launch is None or t_step >= t_launch) else rec.launched_at
    quiet = age_s(since, now)
    expect = max(lim.stall_floor_s, STALL_LOGS * rec.log_s) if rec.log_s else lim.stall_floor_s
    if quiet is None or quiet <= expect:
        return None
    every = f", expected one every ~{human_duration(rec.log_s)}" if rec.log_s else ""
    pid = f" (pid {rec.pid})" if rec.pid else ""
    return (
        f"{TRAINING.key}stalled:{run}:{since}",
        (f":warning: Training STALLED: no step for {human_duration(quiet)} at step {rec.step}{every}"),
        (
            f"the trainer{pid} still runs, so `/train resume` is refused; a save or an eval pauses the steps "
            "too. If it stays silent: `/train stop`, then `/train resume` from the last durable checkpoint"
        ),
    )


_post = functools.partial(supervised.post, render_train)  # the paths and the trainer's words for operators


def _moving_again(p: TrainPosted, rec: TrainRecord) -> list[Action]:
    """A silent stretch said earlier is over: a step came (a crash or stop says itself)."""
    if not p.quiet or rec.phase != "training":
        return []
    was, p.quiet = p.quiet, ""
    if was.startswith(f"{TRAINING.key}loading:"):
        took = age_s(rec.launched_at, parse_iso(rec.last_step_at))
        head = f":white_check_mark: Training's first step came after {human_duration(took)} of loading"
    else:
        head = ":white_check_mark: Training STALLED resolved: steps again"
    return [_post("recovered", head, rec, None, was)]


def _milestones(p: Posted, rec: TrainRecord, lim: TrainLimits, now: dt.datetime) -> list[Action]:
    """N% of the total steps and each new eval, once each per run (a resume does not repeat them)."""
    run = f"{rec.run_id}:{rec.started_at}"
    p.start(run)
    out = []
    if rec.phase == "training" and rec.total_steps and rec.step:
        reached = p.reached(rec.step, rec.total_steps, lim.milestone_pct)
        if reached:
            key = f"{TRAINING.key}milestone:{run}:{reached}"
            out.append(_post("milestone", f"Training {reached}% reached", rec, now, key))
    if rec.eval_step is not None and rec.eval_step > p.eval_step:
        if rec.phase != "done":  # done says the final eval itself
            head = f":bar_chart: Training eval at step {rec.eval_step:,}: {eval_line(rec, news=True) or 'no metrics'}"
            out.append(_post("milestone", head, rec, now, f"{TRAINING.key}eval:{run}:{rec.eval_step}"))
        p.eval_step = rec.eval_step
    return out


def judge(st, rec: TrainRecord, now: dt.datetime | None = None, lim: TrainLimits | None = None):
    """Pure: the watcher's state (its training part) and one record → what to post, next state."""
    now, lim = now or dt.datetime.now(dt.timezone.utc), lim or TrainLimits()
    st = copy.deepcopy(st)
    if not rec.started:
        return [], st
    p = st.kinds.setdefault(TRAINING.name, TrainPosted())
    episode = f"{rec.run_id}:{rec.launches}"
    found: list[Action] = []
    if rec.phase == "crashed":
        found.append(_post("alert", ":rotating_light: Training CRASHED", rec, now, standing.train_crash_key(rec.to_dict()),
                           why=f": {_reason(rec)}", resume=True))  # fmt: skip
    if rec.nan_loss:
        head = f":rotating_light: Training loss is NaN at step {rec.step}"
        found.append(_post("alert", head, rec, now, f"{TRAINING.key}nan:{episode}"))
    if rec.loss == 0 and rec.acc == 0 and rec.step:
        if rec.step not in p.zero_steps:
            p.zero_steps = (p.zero_steps + [rec.step])[-ZERO_LOGS:]
    elif rec.step and (rec.loss is not None or rec.acc is not None):
        p.zero_steps = []
    if len(p.zero_steps) >= ZERO_LOGS:
        head = (
            f":rotating_light: Training loss and acc both 0 over {ZERO_LOGS} logs (steps "
            f"{', '.join(map(str, p.zero_steps))}): the loss mask is likely empty"
        )
        found.append(_post("alert", head, rec, now, f"{TRAINING.key}zero:{episode}"))
    quiet = _quiet(rec, lim, now)
    moved = [] if quiet and quiet[0] == p.quiet else _moving_again(p, rec)
    if quiet:
        found.append(_post("alert", quiet[1], rec, now, quiet[0], tail=f"\n{quiet[2]}"))
        p.quiet = quiet[0]
    elif rec.phase not in ("loading", "training"):
        p.quiet = ""  # it ended: its crash, stop or done says so
    later = _milestones(p, rec, lim, now)
    if rec.phase == "done":  # its eval line; its export path, for operators
        key = f"{TRAINING.key}done:{rec.run_id}:{rec.ended_at}"
        found.append(_post("done", ":white_check_mark: Training done", rec, now, key))
    out = [a for a in found if a.key not in p.active]
    p.active = (p.active + [a.key for a in out])[-MAX_KEYS:]
    return moved + out + later, st
