"""The training's plain-text summary: what "progress?" and ``/train status`` say of its record
(``runner.contract.train``), an operator's in full, a member's with ``WITHHELD`` for the details."""

from __future__ import annotations

import datetime as dt

from ..contract.status import parse_iso
from ..contract.train import EXPORT_PENDING, TrainRecord, done_fraction, in_sglang_units
from .human import human_bytes, human_duration, now_utc

# A member's text says this where an operator's has a path or the trainer's own words (the chat
# names the operators in it).
WITHHELD = "ask an operator for the details"


def _number(v: float | None, fmt: str) -> str:
    return "?" if v is None else format(v, fmt)


def eval_line(rec: TrainRecord, news: bool = False) -> str:
    """The last eval as the job behind hsx said its 74.7% / ~2.95, and the best so far ('' before
    the first); ``news``: a last eval that is the best says "new best"."""
    bits = []
    if rec.val_acc is not None:
        bits.append(f"val acc {100 * rec.val_acc:.1f}%")
    if rec.acc_len is not None:
        bits.append(simulated(rec.acc_len))
    if rec.best_acc_len is not None and rec.best_step is not None:
        new = news and rec.best_step == rec.eval_step
        best = in_sglang_units(rec.best_acc_len)
        bits.append("new best" if new else f"best ~{best:.2f} at step {rec.best_step:,}")
    return " · ".join(bits)


# What SpecForge's numbers are (specforge/training/controller.py, eval/evaluator.py), said once
# under them (docs/training.md says it at length): acc is the draft's top-1 match of the target's
# token over a logged batch, every draft position pooled; acceptance_rate is sum(min(p_target,
# p_draft)), the chance a sampled draft token is accepted, so it can be high while top-1 acc is
# low; the simulated accept length is SpecForge's eval/simulated_acc_len + 1 (SGLang's units).
MEANS = (
    "acc: the draft's top-1 match, a running mean of the logged batches (val acc: on held-out "
    "answers, the first draft token) · acceptance rate: Σmin(p_target, p_draft) · simulated: "
    "SpecForge's estimate, in SGLang's units"
)


def simulated(acc_len: float) -> str:
    """SpecForge's simulated figure as every message says it: in SGLang's units, so that it reads
    beside a measured accept length."""
    return f"simulated accept length ~{in_sglang_units(acc_len):.2f}"


def metrics_line(rec: TrainRecord) -> str:
    """The loss, the draft's acc (a running mean, from where it started) and the acceptance rate,
    short ('' before the first step); ``MEANS`` says what each is."""
    bits = []
    if rec.nan_loss:
        bits.append("loss NaN")
    elif rec.loss is not None:
        bits.append(f"loss {_number(rec.loss, '.4g')}")
    acc = rec.acc_mean if rec.acc_mean is not None else rec.acc
    if acc is not None:
        start = f" (from {100 * rec.acc_start:.1f}%)" if rec.acc_start is not None else ""
        bits.append(f"acc {100 * acc:.1f}%{start}")
    if rec.acceptance_rate is not None:
        bits.append(f"acceptance rate {_number(rec.acceptance_rate, '.3f')}")
    return " · ".join(bits)


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
    if evals := eval_line(rec):
        at = f" at step {rec.eval_step:,}" if rec.eval_step is not None else ""
        lines.append(f"held-out eval{at}: {evals}")
    elif rec.eval_samples:
        lines.append(f"eval on {rec.eval_samples:,} held-out samples: none yet")
    lines += [f"({MEANS})"] if m or evals else []
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
