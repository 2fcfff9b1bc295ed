"""The status record: one owner for its fields, parsing and validation.

Written by the runner (``status.json``, atomically), read by ``hsx-runner status`` and, as
JSON over SSH, by the ops side. Stdlib only: the ops side imports this without torch.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
from dataclasses import dataclass, field
from typing import Any

from .atomic import write_atomic
from .errors import BrokenFileError, StatusError
from .fields import check, plain, short
from .ranks import RankEntry

SCHEMA = 1
STATUS = "status.json"  # in the job's output directory
EVENTS = "events.jsonl"
STALE_S = 120.0  # an active runner whose heartbeat is older than this may be hung or gone
NOT_STARTED = "not started yet"  # the reason of the stopped record of a job that never ran
# a done job's hand-off to training (runner/train/handoff.py) while it verifies the features
HANDOFF_PENDING = "pending"
# a background verb's progress (runner/job/background.py writes it): the keys a renderer reads
BACKGROUND = {
    "verb": "str", "state": "str", "pid": "int | None", "started_at": "str | None", "done": "int | None",
    "total": "int | None", "bytes": "int | None", "rate_bytes_s": "float | None", "eta_s": "float | None",
    "freed": "int | None", "error": "str | None", "result": "dict | None",
}  # fmt: skip


class Phase(str, enum.Enum):
    """Every kind's phases, in one set of words: each kind uses its own of them (the extraction's
    EXTRACTION_PHASES, the training's ``contract.train.PHASES``); what is terminal is said once."""

    PREFLIGHT = "preflight"  # checking paths, disk, GPUs, lock
    STARTING_SERVER = "starting_server"  # server launched, waiting for readiness
    SELF_TEST = "self_test"  # one request through the dump path
    EXTRACTING = "extracting"  # samples flowing
    LOADING = "loading"  # a training's trainer up, no step yet
    TRAINING = "training"  # a training's steps flowing
    MEASURING = "measuring"  # a measurement's prompts flowing through one setting's server
    REGENERATING = "regenerating"  # a regeneration's rows flowing through the target
    RUNNING = "running"  # a pipeline's stage under way (the stage's own record says how)
    PAUSED = "paused"  # waiting on a condition (disk) with a reason
    DONE = "done"  # every sample committed or failed with a reason
    FAILED = "failed"  # the job stopped itself with a reason
    STOPPED = "stopped"  # stopped on request (SIGTERM / hsx stop)
    CRASHED = "crashed"  # the record says running but the runner is gone

    def is_terminal(self) -> bool:
        return self in (Phase.DONE, Phase.FAILED, Phase.STOPPED, Phase.CRASHED)

    def is_failed(self) -> bool:
        return self in (Phase.FAILED, Phase.CRASHED)

    def is_active(self) -> bool:
        return not self.is_terminal()


EXTRACTION_PHASES = tuple(
    p
    for p in Phase
    if p not in (Phase.LOADING, Phase.TRAINING, Phase.MEASURING, Phase.REGENERATING, Phase.RUNNING)
)


@dataclass
class Disk:
    path: str = ""
    used: int = 0
    free: int = 0
    need: int | None = None  # bytes still needed, projected from bytes per sample


@dataclass
class ServerInfo:
    backend: str = ""
    url: str = ""
    pid: int | None = None
    restarts: int = 0
    started_at: str | None = None
    activity: str = ""  # what the log says it is doing (weight loading, ...)
    last_death: str = ""  # why it last died: the exit code and, from its log, which process


@dataclass
class StatusRecord:
    schema: int = SCHEMA
    job: str = ""
    phase: Phase = Phase.PREFLIGHT
    host: str = ""
    pid: int | None = None
    alive: bool = False
    heartbeat_at: str | None = None
    started_at: str | None = None  # this run
    phase_since: str | None = None
    total: int = 0
    done: int = 0
    done_this_run: int = 0
    adopted: int = 0  # of done: taken over from another tool's output (hsx-runner adopt), not extracted
    failed: int = 0
    errors_this_run: int = 0
    truncated: int = 0
    rate: float | None = None  # samples/s over a recent window of extracted samples
    rate_trend: str | None = None  # steady | rising | falling
    tokens_per_s: float | None = None
    eta_s: float | None = None
    eta_basis: str | None = None  # "tokens" (the rows' token counts are known) or "samples"
    last_commit_at: str | None = None  # this run's newest committed sample
    in_flight: int = 0  # requests out now
    oldest_in_flight_s: float | None = None  # how long the oldest of them has been out
    oldest_in_flight_idx: int | None = None
    latency_p50_s: float | None = None  # per sample, request to commit, over recent samples
    latency_p95_s: float | None = None
    rate_median: float | None = None  # this run's median rate (sampled each minute)
    rate_low_since: str | None = None  # when the rate fell below half of rate_median, while it stays there
    disk: Disk = field(default_factory=Disk)
    server: ServerInfo = field(default_factory=ServerInfo)
    last_error: str | None = None
    reason: str | None = None  # why paused / failed / stopped
    failed_in: str | None = None  # the step or phase that failed (config, model, tokenizer, self_test, ...)
    hint: str | None = None  # what to do about the failure
    log_tail: list[str] | None = None  # the last lines of the log that shows it
    heartbeat_age_s: float | None = None  # filled by readers, not by the writer
    ranks: list[RankEntry] | None = None  # a cluster run only: one entry per rank (the Slurm engine)
    background: dict | None = None  # a background verb (verify) and its progress; filled by readers
    handoff: str | None = None  # [train] set, the job done: HANDOFF_PENDING, then what came of it
    requeues: int = 0  # a Slurm rank: how often its task was requeued (runner/job/requeue.py)
    requeued_for: str | None = None  # ... and why, the last time
    requeued_from: int | None = None  # ... and its done count then (runner/job/requeue.py stalled)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["phase"] = self.phase.value
        if self.ranks is not None:
            d["ranks"] = [r.to_dict() for r in self.ranks]
        for k in ("ranks", "background"):  # absent unless there is one
            if d[k] is None:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: Any) -> StatusRecord:
        """Every field checked (a malformed one is refused by name); unknown keys are ignored, so
        a newer runner's record still reads."""
        if not isinstance(d, dict):
            raise StatusError("status record is not a JSON object")
        phase = next((p for p in EXTRACTION_PHASES if p.value == d.get("phase")), None)
        if phase is None:
            raise StatusError(f"status record has unknown phase {short(d.get('phase'))}")
        where = "status record"
        kw = plain(cls, d, where, skip=("phase", "disk", "server", "log_tail", "ranks"))
        kw["phase"] = phase
        _times(where, kw)
        for name, sub in (("disk", Disk), ("server", ServerInfo)):
            got = d.get(name)
            if got is None:
                kw[name] = sub()
                continue
            check(where, name, got, "dict")
            kw[name] = sub(**_times(f"{where} {name!r}", plain(sub, got, f"{where} {name!r}")))
        tail = d.get("log_tail")
        if tail is not None and not (isinstance(tail, list) and all(isinstance(x, str) for x in tail)):
            raise StatusError("status record field 'log_tail' is not a list of strings")
        if kw.get("background") is not None:
            for k, kinds in BACKGROUND.items():
                if k in kw["background"]:
                    check(f"{where} 'background'", k, kw["background"][k], kinds)
        ranks = d.get("ranks")
        if ranks is not None:
            if not isinstance(ranks, list):
                raise StatusError("status record field 'ranks' is not a list of objects")
            kw["ranks"] = [RankEntry.from_dict(r) for r in ranks]
        return cls(**kw)

    @property
    def fraction(self) -> float:
        return (self.done / self.total) if self.total else 0.0


def now_iso(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_iso(s: str | None) -> dt.datetime | None:
    if not s:
        return None
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def _times(where: str, kw: dict[str, Any]) -> dict[str, Any]:
    """The ``*_at`` and ``*_since`` fields must be instants (a renderer does arithmetic on them)."""
    for k, v in kw.items():
        if k.endswith(("_at", "_since")) and v is not None:
            t = parse_iso(v)
            try:
                ok = t is not None and t.astimezone(dt.timezone.utc) is not None
            except OverflowError:
                ok = False
            if not ok:
                raise StatusError(f"{where} field {k!r} is not an ISO 8601 time or null")
    return kw


def age_s(s: str | None, now: dt.datetime | None = None) -> float | None:
    t = parse_iso(s)
    if t is None:
        return None
    now = now or dt.datetime.now(dt.timezone.utc)
    return (now - t).total_seconds()


def gone(who: str, pid: int | None, phase: str, heartbeat: str | None) -> str:
    """Why a record that says its job is going reads as crashed: the process that wrote it no
    longer holds the job's lock (a kill -9, an OOM kill, a reboot). The rule of every kind."""
    beat = parse_iso(heartbeat)
    beat = beat and beat.astimezone(dt.timezone.utc)
    when = f", {beat:%b} {beat.day} {beat:%H:%M:%S} UTC" if beat else ""  # as a person reads it
    who = f"{who} (pid {pid})" if pid else who
    return f"{who} is gone; it was {phase} at its last heartbeat{when}"


def heartbeat_age(rec: StatusRecord, now: dt.datetime | None = None) -> float | None:
    """Seconds since the runner's last heartbeat (a reader may have filled it in already)."""
    if rec.heartbeat_age_s is not None:
        return rec.heartbeat_age_s
    return age_s(rec.heartbeat_at, now)


def is_stale(rec: StatusRecord, now: dt.datetime | None = None, limit: float = STALE_S) -> bool:
    """The one staleness rule: an active phase whose heartbeat is older than ``limit``."""
    age = heartbeat_age(rec, now)
    return rec.phase.is_active() and age is not None and age > limit


def write_record(path: str, rec: StatusRecord) -> None:
    write_atomic(path, json.dumps(rec.to_dict(), indent=1) + "\n")


# what to do about a broken extraction record: the runner claims a new one when the job runs
FIX_RECORD = "the runner writes a new one at its next start or resume (hsx-runner resume)"


def read_record(path: str) -> StatusRecord:
    """The record at ``path``; BrokenFileError (its path, what is wrong, what to do) when it is
    there but unreadable or malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise StatusError(f"no status record at {path} (has the job ever run?)") from None
    except (OSError, ValueError) as e:  # ValueError: not UTF-8
        raise BrokenFileError(path, f"it cannot be read ({e})", FIX_RECORD) from None
    try:
        d = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise BrokenFileError(path, f"it is not valid JSON ({str(e)[:200]})", FIX_RECORD) from None
    try:
        return StatusRecord.from_dict(d)
    except StatusError as e:
        raise BrokenFileError(path, str(e), FIX_RECORD) from None


@dataclass(frozen=True)
class RunHead:
    """What every supervised kind's record opens with (the measurement's, the regeneration's, the
    pipeline's): its phase, its supervisor's pid and heartbeat, when it started and ended, why."""

    phase: str = "stopped"
    pid: int | None = None
    heartbeat: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    reason: str | None = None

    @classmethod
    def opened(cls, d: Any, where: str, phases: tuple[str, ...], times: tuple[str, ...] = (),
               skip: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
        """``d``'s fields of ``cls`` checked as far as every such record's are: an object, one of
        ``phases``, each field of its annotated kind (``skip``: the caller's own), its times and
        each of ``times`` ISO times."""
        if not isinstance(d, dict):
            raise StatusError(f"{where} is not a JSON object")
        if d.get("phase") not in phases:
            raise StatusError(f"{where} has unknown phase {short(d.get('phase'))}")
        kw = plain(cls, d, where, skip)
        for k in ("heartbeat", "started_at", "ended_at", *times):
            if kw.get(k) is not None and parse_iso(kw[k]) is None:
                raise StatusError(f"{where} field {k!r} is not an ISO time (got {short(kw[k])})")
        return kw

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def active(self) -> bool:
        return Phase(self.phase).is_active()
