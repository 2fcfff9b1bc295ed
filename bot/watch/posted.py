"""What one kind has posted, its part of the watcher's saved state (bot/watch/watcher.py): its
alerts and milestones, so that a restart of the bot posts none of them again and a post Slack
refused is posted at the next tick. Every kind keeps the same; a judge that remembers more keeps
it in a subclass (train_watch's)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from bot.verbs.table import kind_of_key
from bot.watch.action import Action

MAX_KEYS = 500  # alert keys kept


@dataclass
class Posted:
    run: str = ""  # the run whose milestones these are: a new run restarts them
    milestone: int = 0  # the highest percent posted (100: done, where done ends the milestones)
    eval_step: int = -1  # the last eval posted, by its step (the training's)
    active: list[str] = field(default_factory=list)  # alert keys posted (the extraction's: while true)
    requeued: list[str] = field(default_factory=list)  # a Slurm rank's requeues said, by their keys

    @classmethod
    def load(cls, d: dict) -> Posted:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def start(self, run: str) -> None:
        """The milestones of ``run``: a new run counts from 0 again."""
        if self.run != run:
            self.run, self.milestone, self.eval_step = run, 0, -1

    def reached(self, done: int, total: int, pct: int) -> int:
        """The percent milestone passed since the last one posted, taken as posted; 0 when none.
        The 100% is done's to say."""
        at = int(100 * done / total) // pct * pct
        if not self.milestone < at < 100:
            return 0
        self.milestone = at
        return at

    def undelivered(self, prev: Posted, a: Action) -> None:
        """A post that failed: the next tick posts it again."""
        self.active = [k for k in self.active if k != a.key]
        self.requeued = [k for k in self.requeued if k != a.key]
        back = prev if prev.run == self.run else Posted()  # a new run's milestones count from 0
        if a.key.removeprefix(kind_of_key(a.key).key).startswith("eval:"):
            self.eval_step = back.eval_step
        elif a.kind in ("milestone", "done"):
            self.milestone = back.milestone
