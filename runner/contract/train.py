"""The training run's record as ``hsx-runner train status --json`` prints it, typed and checked
(its plain text, what "progress?" and ``/train status`` say, is ``runner.text.training``).

The box writes it (runner/train/record.py); this side only reads it: unknown keys are ignored,
a known key holding the wrong kind is refused by name, like the extraction's status record.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .errors import StatusError
from .fields import plain, short
from .status import NOT_STARTED, Phase, parse_iso

ACTIONS = (
    "setup",
    "start",
    "resume",
    "stop",
    "status",
    "export",
    "history",
    "after-extraction",
)  # hsx-runner train ACTION
PACE_ENV = (
    "HSX_DEMO_TRAIN_PACE_S"  # the demo's trainer: at least this long per optimizer step (the CPU lane's shim)
)
PHASES = tuple(
    p.value
    for p in (Phase.PREFLIGHT, Phase.LOADING, Phase.TRAINING, Phase.DONE, Phase.STOPPED, Phase.CRASHED)
)
ACTIVE = tuple(p for p in PHASES if Phase(p).is_active())
WHERE = "training record"
EXPORT_PENDING = "pending"  # the record's export while the supervisor exports at the end
ACC_WINDOW = 10  # logged batches: acc_mean's reach and acc_start's
METRICS = (
    "loss",
    "acc",
    "acc_mean",
    "acc_start",
    "acceptance_rate",
    "val_acc",
    "acc_len",
    "best_acc_len",
    "log_s",
)
MAX_STEP = 10**12  # a step past this is no training's: a bad line in the log, a broken record
COUNTS = (
    "step", "total_steps", "epoch", "epochs", "checkpoint_step", "eval_step", "best_step", "bad_lines", "acc_logged"
)  # fmt: skip


@dataclass(frozen=True)
class TrainRecord:
    phase: str = "stopped"
    step: int | None = None
    total_steps: int | None = None
    epoch: int | None = None
    epochs: int | None = None
    loss: float | None = None
    acc: float | None = None  # the last logged batch's: one batch, noisy
    acc_mean: float | None = None  # over about the last ACC_WINDOW logged batches (a running mean)
    acc_start: float | None = None  # the mean over the first ACC_WINDOW logged batches of the run
    acc_logged: int | None = None  # how many logged batches said an acc
    acceptance_rate: float | None = None
    checkpoint_step: int | None = None
    checkpoint_at: str | None = None  # when that checkpoint became durable, where the box says
    pid: int | None = None
    supervisor_pid: int | None = None
    run_dir: str | None = None
    export_dir: str | None = None
    python: str | None = None
    heartbeat: str | None = None
    reason: str | None = None
    exit_code: int | None = None
    launch: str | None = None
    launches: int | None = None
    started_at: str | None = None
    launched_at: str | None = None
    ended_at: str | None = None
    last_step_at: str | None = None
    nan_loss: bool | None = None
    run_id: str | None = None
    world: int | None = None
    log_s: float | None = None  # seconds between the last two step lines of this launch
    log_interval: int | None = None
    eval_samples: int | None = None  # held out; 0: no eval
    val_acc: float | None = None  # the last eval's eval/avg_acc
    acc_len: float | None = None  # ... and its eval/simulated_acc_len
    eval_step: int | None = None
    best_acc_len: float | None = (
        None  # the best of SpecForge's simulated_acc_len so far (as SpecForge says it)
    )
    best_step: int | None = None
    export: str | None = None  # "pending" while the end's export runs, then what it said
    export_ok: bool | None = None
    measure: str | None = None  # [train] measure_at_end: what came of starting the measurement
    measure_ok: bool | None = None  # ... whether it started
    run_bytes: int | None = None  # what the run dir holds on disk (checkpoints, logs), said by status
    disk_free: int | None = None  # free on the run dir's filesystem
    disk_path: str | None = None  # that filesystem's mount point
    building: str | None = None  # the trainer's venv being built (a first start): its step and index
    bad_lines: int | None = None  # this launch's log lines the supervisor could not use
    bad_line: str | None = None  # the last of them: its line number and what was wrong, never the line
    requeues: int | None = None  # on Slurm: how often its job was requeued (runner/job/requeue.py)
    requeued_for: str | None = None  # ... and why, the last time
    requeued_from: int | None = None  # ... and its last complete checkpoint's step then

    @classmethod
    def from_dict(cls, d: Any) -> TrainRecord:
        return cls(**checked(d))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def started(self) -> bool:
        """A run was ever launched (not the reader's stand-in for an empty run dir)."""
        return self.reason != NOT_STARTED and (self.run_id is not None or self.launches is not None)

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    def steps_per_s(self) -> float | None:
        """Only for a first launch: a resumed one does not say the step it resumed at."""
        t0, t1 = parse_iso(self.launched_at), parse_iso(self.last_step_at)
        if self.launch != "start" or not self.step or t0 is None or t1 is None or t1 <= t0:
            return None
        return self.step / (t1 - t0).total_seconds()


# `train status` adds these to what it read; status.json never holds them
SAID_BY_STATUS = ("run_bytes", "disk_free", "disk_path", "building")
WRITTEN = tuple(f.name for f in dataclasses.fields(TrainRecord) if f.name not in SAID_BY_STATUS)


def checked(d: Any, where: str = WHERE) -> dict[str, Any]:
    """The record's known fields, each checked (StatusError naming the first that is wrong): the
    ops side reads a reply with it, the box its own status.json."""
    if not isinstance(d, dict):
        raise StatusError(f"{where} is not a JSON object")
    if d.get("phase") not in PHASES:
        raise StatusError(f"{where} has unknown phase {short(d.get('phase'))}")
    d = dict(d)
    for k in METRICS:  # a NaN arrives as NaN or as a string
        v = d.get(k)
        if isinstance(v, float) and not math.isfinite(v) or v in ("nan", "NaN", "inf", "-inf"):
            d[k] = None
            d["nan_loss"] = d.get("nan_loss") or k == "loss"
    kw = plain(TrainRecord, d, where, skip=("phase",))
    for k in ("heartbeat", "started_at", "launched_at", "ended_at", "last_step_at", "checkpoint_at"):
        if kw.get(k) is not None and parse_iso(kw[k]) is None:
            raise StatusError(f"{where} field {k!r} is not an ISO time (got {short(kw[k])})")
    for k in COUNTS:  # a bar or an ETA is drawn from them
        if kw.get(k) is not None and not 0 <= kw[k] <= MAX_STEP:
            raise StatusError(f"{where} field {k!r} is not 0..{MAX_STEP:,} (got {short(kw[k])})")
    return kw


def in_sglang_units(simulated: float | None) -> float | None:
    """SpecForge's ``eval/simulated_acc_len`` (Σ_k Π_{i≤k} acc_i) counts accepted draft tokens
    only; SGLang's accept length (completion tokens per verify step) counts the bonus token too,
    as vLLM's and ModelOpt's do: every accept length hsx shows is in SGLang's units."""
    return None if simulated is None else simulated + 1.0


def done_fraction(rec: TrainRecord) -> float:
    """The steps done over the total, 0..1 whatever the record says."""
    if not rec.total_steps or rec.step is None:
        return 0.0
    return min(max(rec.step, 0), rec.total_steps) / rec.total_steps
