"""The training's plain-text summary: what "progress?" and ``/train status`` say of its record
(``runner.contract.train``), an operator's in full, a member's with ``WITHHELD`` for the details."""

from __future__ import annotations

import datetime as dt

from ..contract.status import parse_iso
from ..contract.train import ACC_WINDOW, EXPORT_PENDING, TrainRecord, done_fraction, in_sglang_units
from .human import human_bytes, human_duration, now_utc

# A member's text says this where an operator's has a path or the trainer's own words (the chat
# names the operators in it).
WITHHELD = "ask an operator for the details"


def _number(v: float | None, fmt: str) -> str:
    return "?" if v is None else format(v, fmt)


def eval_line(rec: TrainRecord, news: bool = False, explain: bool = False) -> str:
    """The last eval as the job behind hsx said its 74.7% / ~2.95, and the best so far ('' before
    the first); ``news``: a last eval that is the best says "new best"; ``explain``: what each
    number is (SpecForge's eval/avg_acc and eval/simulated_acc_len)."""
    bits = []
    if rec.val_acc is not None:
        bits.append(f"val acc {100 * rec.val_acc:.1f}%" + (" (first draft token)" if explain else ""))
    if rec.acc_len is not None:
        bits.append(f"{simulated(rec.acc_len)}" + (f" ({ACC_LEN_IS})" if explain else ""))
    if rec.best_acc_len is not None and rec.best_step is not None:
        new = news and rec.best_step == rec.eval_step
        best = in_sglang_units(rec.best_acc_len)
        bits.append("new best" if new else f"best ~{best:.2f} at step {rec.best_step:,}")
    return " · ".join(bits)


# What SpecForge's numbers are (specforge/training/controller.py, eval/evaluator.py): acc is the
# draft's top-1 match of the target's token over the logged step's batch, every draft position
# pooled; acceptance_rate is sum(min(p_target, p_draft)), the chance a sampled draft token is
# accepted, so it can be high while top-1 acc is low.
RATE_IS = "acceptance rate: SpecForge's Σmin(p_target, p_draft), the chance a sampled draft token is accepted"
ACC_LEN_IS = (
    "SpecForge's estimate on the held-out answers, in SGLang's units: tokens per verify step with "
    "the bonus token, SpecForge's own figure + 1"
)


def simulated(acc_len: float) -> str:
    """SpecForge's simulated figure as every message says it: in SGLang's units, so that it reads
    beside a measured accept length."""
    return f"simulated accept length ~{in_sglang_units(acc_len):.2f}"


def metrics_line(rec: TrainRecord) -> str:
    """The logged step's loss, acc and acceptance rate, each named ('' before the first)."""
    bits = []
    if rec.nan_loss:
        bits.append("train loss NaN")
    elif rec.loss is not None:
        bits.append(f"train loss {_number(rec.loss, '.4g')}")
    if rec.acc is not None and rec.acc_mean is None:
        bits.append(f"draft top-1 acc {100 * rec.acc:.1f}%")
    if rec.acceptance_rate is not None:
        bits.append(f"acceptance rate {_number(rec.acceptance_rate, '.3f')}")
    why = f"; {RATE_IS}" if rec.acceptance_rate is not None else ""
    said = " · ".join(bits) + f" (last logged batch{why})" if bits else ""
    return " · ".join(x for x in (said, acc_line(rec)) if x)


def acc_line(rec: TrainRecord) -> str:
    """The draft's top-1 acc as a mean over logged batches (one batch's is noise), and once
    ACC_WINDOW batches are in, where it started: whether the draft learns, in one line."""
    if rec.acc_mean is None:
        return ""
    n = rec.acc_logged or 0
    acc = f"draft top-1 acc {100 * rec.acc_mean:.1f}%"
    if rec.acc_start is None:
        return f"{acc} (mean of the {n} logged {'batch' if n == 1 else 'batches'} so far)"
    return (
        f"{acc} (running mean of the last ~{ACC_WINDOW} logged batches; "
        f"{100 * rec.acc_start:.1f}% over the first {ACC_WINDOW})"
    )


def render_train(rec: TrainRecord, now: dt.datetime | None = None, full: bool = True) -> str:
    """The training in plain text: phase, step / total and %, epoch, rate, ETA, the metrics
    named, the last durable checkpoint, the reason when it ended badly, the export when done.
    ``full``: an operator's, with the paths and the trainer's own words; else the same story
    with ``WITHHELD`` where those were."""
    now = now_utc(now)
    if rec.building:
        return (
            f"training: building the trainer's venv: {rec.building}"
            if full
            else "training: building the trainer's venv"
        )
    if not rec.started:
        return "training: not started (`/train start`)"
    head = "training" if rec.phase == "training" else f"training {rec.phase}"
    if rec.total_steps:
        step = rec.step or 0
        head += f" — step {step:,} / {rec.total_steps:,} ({100.0 * done_fraction(rec):.1f}%)"
    lines = [head]
    bits = [f"epoch {rec.epoch}/{rec.epochs or '?'}"] if rec.epoch is not None else []
    rate = rec.steps_per_s()
    if rate:
        bits.append(f"{rate:.3g} steps/s")
        if rec.active and rec.total_steps and rec.step is not None:
            bits.append(f"ETA {human_duration(max(0, rec.total_steps - rec.step) / rate)}")
    lines += [" · ".join(bits)] if bits else []
    lines += [m] if (m := metrics_line(rec)) else []
    if evals := eval_line(rec, explain=True):
        at = f" at step {rec.eval_step:,}" if rec.eval_step is not None else ""
        lines.append(f"held-out eval{at}: {evals}")
    elif rec.eval_samples:
        lines.append(f"eval on {rec.eval_samples:,} held-out samples: none yet")
    if rec.bad_lines:
        word = "line" if rec.bad_lines == 1 else "lines"
        lines.append(f"{rec.bad_lines:,} train.log {word} not read as steps; the last: {rec.bad_line or '?'}")
    if rec.phase == "loading":
        lines.append("loading the target head and counting the vocab (SpecForge is silent meanwhile)")
    if rec.checkpoint_step is not None:
        at = parse_iso(rec.checkpoint_at)
        age = f" ({human_duration((now - at).total_seconds())} ago)" if at else ""
        lines.append(f"last durable checkpoint: step {rec.checkpoint_step:,}{age}")
    elif rec.started:
        lines.append("no durable checkpoint yet")
    if rec.requeues:  # on Slurm: its job requeued (a time limit, a preemption, a node) and resumed
        times = {1: "once", 2: "twice"}.get(rec.requeues, f"{rec.requeues} times")
        lines.append(f"requeued by Slurm {times}, each time resumed from its last checkpoint"
                     + (f" (the last: {rec.requeued_for})" if rec.requeued_for else ""))  # fmt: skip
    if rec.run_bytes is not None:
        lines.append(_disk_line(rec, full))
    lines += _ending(rec, full)
    return "\n".join(lines)


def _disk_line(rec: TrainRecord, full: bool) -> str:
    if not full:
        free = f" · {human_bytes(rec.disk_free)} free on its disk" if rec.disk_free is not None else ""
        return f"run dir: {human_bytes(rec.run_bytes)}{free}"
    free = (
        f" · {rec.disk_path or 'its disk'}: {human_bytes(rec.disk_free)} free"
        if rec.disk_free is not None
        else ""
    )
    return f"run dir {rec.run_dir or '?'}: {human_bytes(rec.run_bytes)}{free}"


def _ending(rec: TrainRecord, full: bool) -> list[str]:
    """Why it waits or ended and what comes of it: the box's words and paths for operators."""
    lines = []
    if rec.phase == "preflight" and rec.reason:  # a Slurm job in the queue says why it waits
        lines.append(f"waiting: {rec.reason}" if full else f"waiting to launch; {WITHHELD}")
    if rec.phase in ("crashed", "stopped") and rec.reason:
        lines.append(f"{rec.phase}: {rec.reason}" if full else f"the training {rec.phase}; {WITHHELD}")
    if rec.phase == "crashed":
        lines.append("`/train resume` continues from the last durable checkpoint")
    where = f" to {rec.export_dir or 'the export dir'}" if full else ""
    if rec.export == EXPORT_PENDING and rec.active:
        lines.append(f"exporting the draft{where} (SpecForge's export)")
    if rec.phase == "done":
        again = "" if rec.export_ok else " — `/train export` tries again"
        if rec.export and rec.export != EXPORT_PENDING and full:
            lines.append(f"done; {rec.export}{again}")
        elif rec.export and rec.export != EXPORT_PENDING:
            lines.append(
                "done; the draft is exported"
                if rec.export_ok
                else f"done; the export failed{again}; {WITHHELD}"
            )
        else:
            lines.append(f"done; `/train export` writes the draft{where}")
    if rec.phase == "done" and rec.measure:
        if full:
            lines.append(rec.measure)
        else:
            lines.append("measuring the draft in SGLang: `/measure status`" if rec.measure_ok
                         else f"the draft's measurement did not start; {WITHHELD}")  # fmt: skip
    return lines
