"""The watcher: poll the GPU box, post milestones and crash alerts, keep one progress message.

`decide(state, observation)` is pure: what happened → what to post and the next state.
`Watcher.tick()` observes, decides, delivers and saves the state atomically, so a restart
neither repeats an alert nor misses a new one.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field

from bot.render import summary
from bot.render.mrkdwn import escape
from bot.slack.slack_out import Action, resume_button
from bot.verbs.audit import ask_operators
from bot.verbs.table import TRAINING, kind_of_key
from bot.watch import history
from bot.watch.extraction_watch import RESOLVES, Limits, conditions
from bot.watch.train_watch import TrainLimits, undelivered, watch_training
from remote.errors import BadReply, BrokenFile, RemoteError
from remote.live import LiveStatus
from runner.contract import status
from runner.contract.atomic import write_atomic
from runner.contract.config import Config
from runner.contract.status import Phase, StatusRecord
from runner.text import extraction, human
from runner.text.training import WITHHELD

log = logging.getLogger("hsx.watcher")
MAX_KEYS = 500


@dataclass
class WatchState:
    job: str = ""  # job + total: milestones restart when this changes
    milestone: int = 0  # highest milestone posted (percent)
    active: list[str] = field(default_factory=list)  # alert keys currently true (posted once)
    background: str = ""  # the background job whose result was posted (verb:started_at)
    errors: int | None = None  # errors_this_run at the last poll
    run: str = ""  # started_at of the run last seen
    phase: str = ""
    unreachable_since: str | None = None
    progress_channel: str = ""
    progress_ts: str = ""
    progress_at: str | None = None
    train_active: list[str] = field(default_factory=list)  # training alert keys posted (train_watch)
    train_zero_steps: list[int] = field(default_factory=list)  # the recent logs with loss and acc 0
    train_quiet: str = ""  # the training's silent stretch alerted (its end is said)
    train_run: str = ""  # the training run whose milestones these are (run_id:started_at)
    train_milestone: int = 0  # its highest percent posted
    train_eval_step: int = -1  # its last eval posted

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
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known}) if isinstance(d, dict) else cls()

    def save(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write_atomic(path, json.dumps(asdict(self), indent=1))


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


def decide(prev: WatchState, obs: Observation, lim: Limits) -> tuple[list[Action], WatchState]:
    """Pure: previous state + one observation → actions to deliver and the next state."""
    st = WatchState(**asdict(prev))
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
    actions += _answered(st, now)
    text = extraction.render_text(rec, now, lim.heartbeat_stale_s)

    conds = conditions(rec, prev, lim, now)
    keep = [k for k in st.active if k in conds]
    for key in st.active:  # an episode that ended: say so, once
        kind = key.split(":", 1)[0]
        if key not in conds and kind in RESOLVES:
            actions.append(
                Action(
                    "recovered",
                    f":white_check_mark: {RESOLVES[kind]} resolved on {rec.host or 'the GPU box'}\n{text}",
                    key=key,
                )
            )
        elif key not in conds and kind in AGAIN:
            head = f":white_check_mark: {AGAIN[kind]} on {rec.host or 'the GPU box'}"
            actions.append(Action("recovered", f"{head}\n{text}", key=key))
    for key, (head, resume) in conds.items():
        if key not in st.active:
            body = (
                text
                if not rec.last_error or rec.last_error in text
                else f"{text}\nlast error: {rec.last_error}"
            )
            if rec.phase.is_failed() and extraction.log_block(rec):
                body += "\n" + extraction.log_block(rec)
            actions.append(
                Action(
                    "alert",
                    f":rotating_light: {head} on {rec.host or 'the GPU box'}\n{body}",
                    key=key,
                    resume=resume,
                )
            )
            keep.append(key)
    st.active = keep[-MAX_KEYS:]

    last = status.parse_iso(st.progress_at)
    due = last is None or (now - last).total_seconds() >= lim.progress_update_s or st.phase != rec.phase.value
    if due:
        actions.append(
            Action("progress", text, blocks=summary.render_blocks(rec, now, lim.heartbeat_stale_s))
        )
        st.progress_at = _iso(now)
    later: list[Action] = []  # milestones go in the thread of the progress message
    job = f"{rec.job}:{rec.total}"
    if st.job != job:
        st.job, st.milestone = job, 0
    if rec.total:
        reached = int(100 * rec.done / rec.total) // lim.milestone_pct * lim.milestone_pct
        reached = min(reached, 100 if rec.done >= rec.total else 99)
        if reached > st.milestone and reached > 0 and reached < 100:
            if not rec.phase.is_failed():  # a failed record's counts are in its alert, not a milestone
                later.append(
                    Action("milestone", f"{reached}% reached\n{text}", key=f"milestone:{job}:{reached}")
                )
            st.milestone = reached
    # done, once the hand-off to training ([train]) has ended: the text says what came of it
    if rec.phase is Phase.DONE and st.milestone < 100 and rec.handoff != status.HANDOFF_PENDING:
        later.append(Action("done", f":white_check_mark: {text}", key=f"done:{job}"))
        st.milestone = 100

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
        self.lim, self.train_lim = Limits.from_config(cfg), TrainLimits.from_config(cfg)
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
        try:
            actions, st = decide(prev, obs, self.lim)
        except Exception as e:  # a record the renderers cannot read: reported as unreadable
            log.exception("could not judge the status record")
            why = BadReply(f"the record could not be read ({type(e).__name__}: {str(e)[:200]})")
            actions, st = decide(prev, Observation(obs.now, error=why), self.lim)
        if self.cfg.train.python:  # [train] set: the training record too
            try:
                more, st = watch_training(self.box, st, obs.now, self.train_lim)
                actions += more
            except Exception:
                log.exception("could not judge the training record")
        done = []
        for a in actions:
            try:
                self.deliver(a, st)
                done.append(a)
            except Exception:
                log.exception("could not post %s %s", a.kind, a.key)
                if kind_of_key(a.key) is TRAINING:  # not delivered: let the next tick post it again
                    undelivered(st, prev, a)
                elif a.kind == "alert":
                    st.active = [k for k in st.active if k != a.key]
                elif a.kind in ("milestone", "done"):
                    st.milestone = prev.milestone
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
