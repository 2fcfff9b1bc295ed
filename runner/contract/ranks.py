"""A cluster run's ranks as the status record carries them: one state vocabulary and one
typed entry per rank. The engine writes them, the renderer and the watcher read them."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from .errors import StatusError
from .fields import check, plain, short

# A cluster run's world, ranges and each rank's Slurm job: in the extraction's output directory,
# in the regeneration's run dir.
STATE_FILE = "cluster.json"


class RankState(str, enum.Enum):
    PENDING = "pending"  # queued in Slurm
    RUNNING = "running"
    STALE = "stale"  # Slurm says running, the rank's heartbeat is old
    DONE = "done"  # its samples are all committed or failed with a reason
    STOPPED = "stopped"  # hsx stop asked for it
    CANCELLED = "cancelled"  # scancel or a signal nobody asked hsx for
    FAILED = "failed"
    NODE_FAIL = "node_fail"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    CRASHED = "crashed"  # its record says active, its task is gone
    LOST = "lost"  # submitted, unknown to Slurm, never wrote a record
    IDLE = "idle"  # never submitted


# A state the watcher alerts on, once per rank episode, with a Resume button.
ALERTING = frozenset(
    {
        RankState.FAILED,
        RankState.NODE_FAIL,
        RankState.TIMEOUT,
        RankState.PREEMPTED,
        RankState.CANCELLED,
        RankState.CRASHED,
        RankState.LOST,
    }
)
LIVE = frozenset({RankState.RUNNING, RankState.STALE})  # its task runs: it counts in rate and phase
QUIET = frozenset({RankState.RUNNING, RankState.DONE})  # nothing worth a line in the summary
NAMED = (RankState.RUNNING, RankState.PENDING, RankState.DONE, RankState.STOPPED)  # any other reads "failed"


@dataclass
class RankEntry:
    rank: int = 0
    lo: int = 0  # [lo, hi): the rank's samples
    hi: int = 0
    state: RankState = RankState.IDLE
    job: str | None = None  # its latest Slurm task, JOB_RANK
    slurm: str | None = None  # Slurm's word for that task (RUNNING, CANCELLED, ...)
    node: str = ""
    slurm_reason: str = ""
    phase: str | None = None  # the rank's own record's phase
    total: int = 0
    done: int = 0
    failed: int = 0
    rate: float | None = None  # only while it runs
    eta_s: float | None = None
    heartbeat_age_s: float | None = None
    reason: str | None = None
    requeues: int = 0  # how often Slurm requeued its task (before a time limit, a preemption, a node failure)
    requeued_for: str | None = None  # why, the last time

    def __post_init__(self) -> None:
        self.state = RankState(self.state)  # a plain string from a caller: still one vocabulary

    def word(self) -> str:
        """'NODE_FAIL': Slurm's word when it says more than RUNNING, else hsx's state."""
        return self.slurm if self.slurm not in (None, "", "RUNNING") else self.state.value.upper()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["state"] = self.state.value
        return d

    @classmethod
    def from_dict(cls, d: Any) -> RankEntry:
        if not isinstance(d, dict):
            raise StatusError("status record field 'ranks' is not a list of objects")
        check("rank entry", "rank", d.get("rank", 0), "int")
        kw = plain(cls, d, f"rank {d.get('rank', 0)}", skip=("state",))
        try:
            return cls(**kw)
        except ValueError:
            raise StatusError(f"rank {kw.get('rank', 0)} has unknown state {short(d.get('state'))}") from None
