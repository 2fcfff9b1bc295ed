"""The watcher: poll the GPU box, post milestones and crash alerts, keep one progress message.

`decide(state, observation)` is pure: what happened → what to post and the next state; it
keeps the box's own parts (unreachable, unreadable, a background verb's result) and asks the
extraction's judge (extraction_watch), whose record is the box's status.
`Watcher.tick()` observes, decides, reads each other kind's own record and asks its judge
(train_watch, measure_watch, regenerate_watch, pipeline_watch), then the pinned progress message
(pinned.py) from the records this tick read, delivers, and saves the state atomically, so a
restart neither repeats an alert nor misses a new one. What each kind posted is its part of the
state (posted.py).
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field

from bot.render import summary
from bot.render.mrkdwn import escape
from bot.verbs.audit import ask_operators
from bot.verbs.table import EXTRACTION, MEASURING, PIPELINE, REGENERATING, TRAINING, kind_of_key
from bot.watch import (
    extraction_watch,
    history,
    measure_watch,
    pinned,
    pipeline_watch,
    regenerate_watch,
    train_watch,
)
from bot.watch.action import Action, resume_button
from bot.watch.extraction_watch import Limits
from bot.watch.posted import Posted
from bot.watch.train_watch import TrainLimits, TrainPosted
from remote.errors import BadReply, BrokenFile, RemoteError
from remote.live import LiveStatus
from runner.contract import status
from runner.contract.atomic import write_atomic
from runner.contract.config import Config
from runner.contract.kinds import KINDS as SPECS
from runner.contract.status import StatusRecord
from runner.text import extraction, human
from runner.text.training import WITHHELD

log = logging.getLogger("hsx.watcher")
BOX = ("unreachable:", "unreadable:")  # the box's own alerts' keys: no kind's
PARTS = {TRAINING.name: TrainPosted}  # a kind whose judge remembers more than its posts


@dataclass
class WatchState:
    active: list[str] = field(default_factory=list)  # the box's alert keys (BOX) while true
    background: str = ""  # the background job whose result was posted (verb:started_at)
    errors: int | None = None  # the extraction's errors_this_run at the last poll
    run: str = ""  # started_at of the extraction's run last seen
    phase: str = ""  # the extraction's at the last poll
    unreachable_since: str | None = None
    progress_channel: str = ""
    progress_ts: str = ""
    progress_at: str | None = None
    progress_of: list[str] = field(default_factory=list)  # the kinds the pinned message shows (pinned.py)
    progress_phases: str = ""  # ... and their phases: a change edits it at once
    kinds: dict[str, Posted] = field(default_factory=dict)  # what each kind posted, by its KINDS name

    @classmethod
    def load(cls, path: str) -> WatchState:
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except FileNotFoundError:
            return cls()
        except (OSError, json.JSONDecodeError) as e:
            log.error("watcher state %s unreadable (%s); starting fresh", path, e)
            return cls()
        if not isinstance(d, dict):
            return cls()
        d = d if "kinds" in d else _before_kinds(d)
        st = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "kinds"})
        st.kinds = {name: PARTS.get(name, Posted).load(part) for name, part in d["kinds"].items()}
        return st

    def undelivered(self, prev: WatchState, a: Action) -> None:
        """A post that failed: the next tick posts it again (the box's alert, or its kind's post)."""
        self.active = [k for k in self.active if k != a.key]
        name = kind_of_key(a.key).name
        if name in self.kinds:
            self.kinds[name].undelivered(prev.kinds.get(name, Posted()), a)

    def save(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write_atomic(path, json.dumps(asdict(self), indent=1))


def _before_kinds(d: dict) -> dict:
    """A state saved before each kind had its part: the extraction's job, milestone and alert keys
    (the box's among them) and the training's train_* fields, each in its new place."""
    active = d.get("active") or []
    box = [k for k in active if k.startswith(BOX)]
    kinds = {
        EXTRACTION.name: {"run": d.get("job", ""), "milestone": d.get("milestone", 0),
                          "active": [k for k in active if k not in box]},
        TRAINING.name: {k.removeprefix("train_"): v for k, v in d.items() if k.startswith("train_")},
    }  # fmt: skip
    return {**d, "active": box, "kinds": kinds}


@dataclass
class Observation:
    now: dt.datetime
    record: StatusRecord | None = None
    error: RemoteError | None = None
    since: dt.datetime | None = None  # when the box stopped answering, when known


def _iso(t: dt.datetime, timespec: str = "seconds") -> str:
    return t.astimezone(dt.timezone.utc).isoformat(timespec=timespec).replace("+00:00", "Z")


AGAIN = {"unreadable": "Status readable again"}  # ... in these words


def _answered(st: WatchState, now: dt.datetime) -> list[Action]:
    """The box answered: an unreachable episode is over (said once)."""
    out = []
    if st.unreachable_since:
        was = [k for k in st.active if k.startswith("unreachable:")]
        if was:
            since = status.parse_iso(st.unreachable_since)
            after = f" after {human.human_duration((now - since).total_seconds())}" if since else ""
            out.append(Action("recovered", f"GPU box reachable again{after}", key=was[0]))
        st.unreachable_since = None
    return out


def _unreadable(st: WatchState, obs: Observation) -> tuple[list[Action], WatchState]:
    """The box answered with a record nobody can read: said at once, once per episode (a retry
    would read the same bytes); the episode ends, and says so, when a record reads again."""
    actions = _answered(st, obs.now)
    if not any(k.startswith("unreadable:") for k in st.active):
        key = f"unreadable:{_iso(obs.now)}"
        said = (
            summary.error_head(obs.error)
            if isinstance(obs.error, BrokenFile)
            else f"GPU box status unreadable: {obs.error}"
        )
        text = f":warning: {said}\n(`hsx-runner status --json` on the box shows it)"
        actions.append(Action("alert", text, key=key))
        st.active = st.active + [key]
    return actions, st


def _readable(st: WatchState, rec: StatusRecord, text: str) -> list[Action]:
    """A record read: the box's episodes are over; an unreadable one says so."""
    was = [k for k in st.active if k.startswith("unreadable:")]
    st.active = []
    head = f":white_check_mark: Status readable again on {rec.host or 'the GPU box'}"
    return [Action("recovered", f"{head}\n{text}", key=k) for k in was]


def decide(prev: WatchState, obs: Observation, lim: Limits) -> tuple[list[Action], WatchState]:
    """Pure: previous state + one observation → actions to deliver and the next state. The box's
    own parts, and the extraction's judge: its record is the box's status."""
    st = copy.deepcopy(prev)
    actions: list[Action] = []
    if obs.record is None and isinstance(obs.error, BadReply):
        return _unreadable(st, obs)
    if obs.record is None:
        since = status.parse_iso(st.unreachable_since) or min(obs.since or obs.now, obs.now)
        st.unreachable_since = _iso(since, "milliseconds")  # the alert's clock: not a second early
        key = f"unreachable:{st.unreachable_since}"
        if (obs.now - since).total_seconds() >= lim.unreachable_alert_s and key not in st.active:
            text = (
                summary.render_error(obs.error, unreachable_since=since, now=obs.now)
                if obs.error
                else "unreachable"
            )
            actions.append(Action("alert", f"GPU box unreachable\n{text}", key=key))
            st.active = st.active + [key]
        return actions, st

    rec, now = obs.record, obs.now
    text = extraction.render_text(rec, now, lim.heartbeat_stale_s)
    actions += _answered(st, now) + _readable(st, rec, text)
    alerts, later = extraction_watch.judge(st, rec, lim, now, text)  # milestones go in the thread
    actions += alerts
    bg = rec.background or {}
    key = f"{bg.get('verb')}:{bg.get('started_at')}"
    if extraction.background_result(rec) and st.background != key:  # its result, once
        later.append(Action("result", extraction.background_result(rec), key=key))
        st.background = key
    actions += later
    st.phase = rec.phase.value
    st.run = rec.started_at or ""
    st.errors = rec.errors_this_run
    return actions, st


class Watcher:
    """Observe → decide → deliver to Slack → save. One tick per scheduler interval."""

    def __init__(self, box, cfg: Config, client, clock=None, live: LiveStatus | None = None):
        self.box, self.cfg, self.client = box, cfg, client
        self.lim = Limits.from_config(cfg)
        # the other kinds' judges, each with the read of its own record, where its config asks
        # for it (runner.contract.kinds' followed)
        stall_s = cfg.watcher.stall_after_s
        judges = {
            TRAINING.name: ("train", functools.partial(train_watch.judge, lim=TrainLimits.from_config(cfg))),
            MEASURING.name: ("measure", functools.partial(measure_watch.judge, stall_s=stall_s)),
            REGENERATING.name: ("regenerate", functools.partial(regenerate_watch.judge, stall_s=stall_s)),
            PIPELINE.name: ("pipeline", pipeline_watch.judge),
        }
        self.judges = {
            name: (functools.partial(box.record, spec), judge)
            for name, (spec, judge) in judges.items()
            if SPECS[spec].followed(cfg)
        }
        self.path = history.state_path(cfg)
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        self.live = live if live is not None else LiveStatus(box, clock=self.clock)
        self.channel = cfg.slack.alert_channel or (cfg.slack.channels[0] if cfg.slack.channels else "")
        if not self.channel:
            raise ValueError("[slack] alert_channel (or channels) is needed for the watcher")

    def observe(self) -> Observation:
        r = self.live.read()  # within the answer bound: a hung box does not hold up the ticks
        now = self.clock()  # after the wait, so an alert that came due during it is not a poll late
        if r.fresh:
            return Observation(now, record=r.record)
        return Observation(now, error=r.error, since=r.failing_since)

    def tick(self) -> list[Action]:
        """One poll. No step's failure stops the later ones: the alerts are still posted and the
        state is still saved (each failure is logged with its stack)."""
        t0 = time.monotonic()
        prev = WatchState.load(self.path)
        obs = self.observe()
        looked = time.monotonic() - t0
        if obs.record is not None:
            try:
                history.append(self.cfg, obs.record)
            except Exception:
                log.exception("could not append to the chart's history")
        seen = {}  # each record read and judged this tick, by its kind: what the pinned message says
        try:
            actions, st = decide(prev, obs, self.lim)
            if obs.record is not None:
                seen[EXTRACTION.name] = obs.record
        except Exception as e:  # a record the renderers cannot read: reported as unreadable
            log.exception("could not judge the status record")
            why = BadReply(f"the record could not be read ({type(e).__name__}: {str(e)[:200]})")
            actions, st = decide(prev, Observation(obs.now, error=why), self.lim)
        for name, (read, judge) in self.judges.items():
            try:
                rec = read()
                more, st = judge(st, rec, obs.now)
                actions += more
                seen[name] = rec
            except RemoteError as e:  # a box that cannot say is the extraction's alert to give
                log.warning("could not read the %s record: %s", name, e)
            except Exception:
                log.exception("could not judge the %s record", name)
        actions = pipeline_watch.fold(actions, seen)
        try:
            ask = ask_operators(self.cfg.slack.operators)
            more, st = pinned.judge(st, seen, obs.now, self.lim, ask, read=[EXTRACTION.name, *self.judges])
            thread = next((i for i, a in enumerate(actions) if a.kind in ("milestone", "done")), len(actions))
            actions[thread:thread] = more  # posted before what goes in its thread
        except Exception:
            log.exception("could not say the progress message")
        done = []
        for a in actions:
            try:
                self.deliver(a, st)
                done.append(a)
            except Exception:
                log.exception("could not post %s %s", a.kind, a.key)
                st.undelivered(prev, a)
        try:
            st.save(self.path)
        except Exception:
            log.exception("could not save the watcher state %s", self.path)
        took = time.monotonic() - t0
        if took > max(5.0, self.cfg.watcher.interval_s):  # later ticks were skipped meanwhile
            log.warning("slow watcher tick: %.1fs (status %.1fs, %d posts)", took, looked, len(actions))
        return done

    def deliver(self, a: Action, st: WatchState) -> None:
        ask = ask_operators(self.cfg.slack.operators)  # where a member's text withholds a path
        text = escape(a.text).replace(WITHHELD, ask)  # the box's words (its blocks come escaped from summary)
        if a.kind == "progress":
            if st.progress_ts:
                self.client.chat_update(
                    channel=st.progress_channel, ts=st.progress_ts, text=text, blocks=a.blocks
                )
                return
            r = self.client.chat_postMessage(channel=self.channel, text=text, blocks=a.blocks)
            st.progress_channel, st.progress_ts = r["channel"], r["ts"]
            self.client.pins_add(channel=st.progress_channel, timestamp=st.progress_ts)
        elif a.kind in ("milestone", "done"):
            self.client.chat_postMessage(
                channel=st.progress_channel or self.channel,
                thread_ts=st.progress_ts or None,
                text=text,
                reply_broadcast=a.kind == "done",
            )
        else:  # alert, recovered, result
            section = {"type": "section", "text": {"type": "mrkdwn", "text": escape(a.text, 2900)}}
            blocks = [summary.asking(section, ask)]
            if a.resume:
                blocks.append(resume_button(a.key))
            self.client.chat_postMessage(channel=self.channel, text=text, blocks=blocks)
        if a.private and a.kind in ("alert", "done"):
            self.tell_operators(a)

    def tell_operators(self, a: Action) -> None:
        """The full text, paths and the trainer's words, to each operator by DM (a user id as the
        channel: the bot's messages tab). One that fails is logged: the channel has the alert."""
        for user in self.cfg.slack.operators:
            try:
                self.client.chat_postMessage(channel=user, text=escape(a.private))
            except Exception:
                log.exception("could not DM %s the %s %s", user, a.kind, a.key)


def start_watcher(box, cfg: Config, client, live: LiveStatus | None = None):
    """An APScheduler background job that ticks every [watcher] interval_s."""
    from apscheduler.schedulers.background import BackgroundScheduler

    scheduler = BackgroundScheduler(timezone="UTC")
    if not (cfg.slack.alert_channel or cfg.slack.channels):
        log.warning("no [slack] alert_channel or channels: the watcher is off")
        scheduler.start()
        return scheduler
    return schedule(Watcher(box, cfg, client, live=live), cfg.watcher.interval_s, scheduler)


def schedule(watcher: Watcher, interval_s: float, scheduler=None):
    """Tick ``watcher`` every ``interval_s`` on an APScheduler background job, the first at once."""
    if scheduler is None:
        from apscheduler.schedulers.background import BackgroundScheduler

        scheduler = BackgroundScheduler(timezone="UTC")
    # a tick still running when the next is due is skipped (max_instances): the watcher says a
    # slow tick itself, so the scheduler's own warning of each skip is noise in a console
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    scheduler.add_job(
        watcher.tick,
        "interval",
        seconds=interval_s,
        max_instances=1,
        coalesce=True,
        next_run_time=dt.datetime.now(dt.timezone.utc),
    )
    scheduler.start()
    return scheduler
