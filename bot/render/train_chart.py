"""`/train chart`: the training's story as one PNG, drawn like `/extract chart`'s (bot/render/chart.py).

``story()`` reads the box's history (``hsx-runner train history``, remote.client.GpuBox.train_history)
and the record now into one line per launch of loss and of acc over the steps, the evals (val acc,
the simulated accept length in SGLang's units, the best so far) and the launch marks: each crash, stop, resume
and the end. ``figure()`` draws it, loss above and acc below; ``caption()`` says it in a line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from bot.render.chart import new_figure, png
from runner.contract.train import ACC_WINDOW, TrainRecord, in_sglang_units

ENDS = ("crashed", "stopped", "done")  # a record's phase that ends a launch: its mark's kind
WORDS = {"crashed": ("crash", "crashes"), "stopped": ("stop", "stops"), "resumed": ("resume", "resumes")}


class Step(NamedTuple):
    step: int
    loss: float | None
    acc: float | None


class Eval(NamedTuple):
    step: int
    val_acc: float | None
    accept_length: float | None  # simulated, in SGLang's units


class Mark(NamedTuple):
    kind: str  # crashed, stopped, resumed, done
    step: int | None  # the last logged step; None: before any
    launch: int | None


@dataclass
class TrainStory:
    run_id: str = ""
    phase: str | None = None
    step: int | None = None
    total_steps: int | None = None
    launches: list[list[Step]] = field(default_factory=list)  # one line per launch
    evals: list[Eval] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    best: Eval | None = None  # the eval with the best simulated accept length

    @property
    def points(self) -> list[Step]:
        return [p for run in self.launches for p in run]

    def count(self, kind: str) -> int:
        return sum(m.kind == kind for m in self.marks)


def story(history: dict, rec: TrainRecord | None = None) -> TrainStory:
    """The history as ``GpuBox.train_history`` checked it; the record adds the run's name, its
    total, and an end the box could not write (a supervisor killed with the trainer)."""
    s = TrainStory()
    launch: int | None = None
    for p in history.get("points", []):
        run = s.launches[-1] if s.launches else None
        new_launch = p["launch"] is not None and p["launch"] != launch
        if run is None or new_launch or p["step"] < run[-1].step:  # a resume goes back a little
            s.launches.append([])
        launch = p["launch"] if p["launch"] is not None else launch
        s.launches[-1].append(Step(p["step"], p["loss"], p["acc"]))
    s.evals = [Eval(e["step"], e["val_acc"], in_sglang_units(e["acc_len"])) for e in history.get("evals", [])]
    s.marks = [Mark(m["kind"], m["step"], m["launch"]) for m in history.get("marks", [])]
    with_len = [e for e in s.evals if e.accept_length is not None]
    s.best = max(with_len, key=lambda e: e.accept_length) if with_len else None  # the first of equals
    s.step = s.points[-1].step if s.points else None
    if rec is not None and rec.started:
        _apply_record(s, rec)
    return s


def _apply_record(s: TrainStory, rec: TrainRecord) -> None:
    s.run_id, s.phase = rec.run_id or "", rec.phase
    s.total_steps = rec.total_steps or s.total_steps
    s.step = rec.step if rec.step is not None else s.step
    if rec.best_acc_len is not None and rec.best_step is not None:
        s.best = Eval(
            rec.best_step,
            rec.val_acc if rec.eval_step == rec.best_step else None,
            in_sglang_units(rec.best_acc_len),
        )
    kind = rec.phase if rec.phase in ENDS else None
    said = any(m.kind == kind and (m.launch == rec.launches or rec.launches is None) for m in s.marks)
    if kind and not said:
        s.marks.append(Mark(kind, s.step, rec.launches))


def _fmt(v: float | None, spec: str = ".3g") -> str:
    return "?" if v is None else format(v, spec)


def title(s: TrainStory) -> str:
    name, phase = s.run_id or "training", s.phase or "?"
    if s.total_steps:
        step = s.step or 0
        pct = 100.0 * step / s.total_steps
        pct = min(pct, 99.9) if step < s.total_steps else pct
        return f"{name}: step {step:,} / {s.total_steps:,} ({pct:.1f}%) — {phase}"
    return f"{name}: step {s.step if s.step is not None else '?'} — {phase}"


def ends(values: list[float | None], n: int = 1) -> tuple[float | None, float | None]:
    """The first and the last known value; with ``n``, the means of the first and the last n."""
    known = [v for v in values if v is not None]
    if not known:
        return None, None
    return sum(known[:n]) / len(known[:n]), sum(known[-n:]) / len(known[-n:])


def rolling(values: list[float | None], n: int = ACC_WINDOW) -> list[float]:
    """Each point's mean over the known values of the last n points (one batch's loss or acc is
    noise)."""
    out = []
    for i in range(len(values)):
        known = [v for v in values[max(0, i - n + 1) : i + 1] if v is not None]
        out.append(sum(known) / len(known) if known else math.nan)
    return out


def caption(s: TrainStory) -> str:
    pts = s.points
    parts = [title(s)]
    l0, l1 = ends([p.loss for p in pts], ACC_WINDOW)  # one batch's loss is noise, as its acc is
    a0, a1 = ends([p.acc for p in pts], ACC_WINDOW)
    parts.append(
        f"loss {_fmt(l0)} → {_fmt(l1)}, acc {_fmt(a0, '.3f')} → {_fmt(a1, '.3f')} (each the mean of the first "
        f"and the last {ACC_WINDOW} logged) over steps {pts[0].step:,} → {pts[-1].step:,}"
    )
    if s.evals:
        last = s.evals[-1]
        acc = "?" if last.val_acc is None else f"{100 * last.val_acc:.1f}%"  # as the job said its 74.7%
        said = f"eval at step {last.step:,}: val acc {acc}"
        if last.accept_length is not None:
            said += f", simulated accept length ~{last.accept_length:.2f}"
        if s.best is not None:
            said += f" (best ~{s.best.accept_length:.2f} at step {s.best.step:,})"
        parts.append(said)
    told = [f"{n} {WORDS[kind][n > 1]}" for kind in WORDS if (n := s.count(kind))]
    if told:
        parts.append(", ".join(told))
    return " · ".join(parts)


STYLE = {  # kind: (colour, line style, label)
    "crashed": ("tab:red", "-", "crash"),
    "stopped": ("dimgray", "-", "stop"),
    "resumed": ("tab:green", "--", "resume"),
    "done": ("darkgreen", "-", "done"),
}


def _nan(v: float | None) -> float:
    return math.nan if v is None else v  # a gap in the line, where the box logged nan


def figure(s: TrainStory):
    """The matplotlib Figure (not drawn): tests read its lines, marks and text."""
    fig = new_figure((10, 6.4))
    ax, ax_acc = fig.subplots(2, 1, sharex=True)
    for i, run in enumerate(s.launches):
        steps = [p.step for p in run]
        ax.plot(steps, [_nan(p.loss) for p in run], color="tab:blue", lw=0.8, alpha=0.45,
                marker="." if len(run) == 1 else None, label="loss (logged batch)" if i == 0 else "_loss",
                gid=f"loss:{i}")  # fmt: skip
        ax.plot(steps, rolling([p.loss for p in run]), color="tab:blue", lw=1.8,
                label=f"loss (mean of the last {ACC_WINDOW})" if i == 0 else "_loss_mean", gid=f"loss_mean:{i}")  # fmt: skip
        ax_acc.plot(steps, [_nan(p.acc) for p in run], color="tab:orange", lw=0.8, alpha=0.45,
                    marker="." if len(run) == 1 else None, label="acc (logged batch)" if i == 0 else "_acc",
                    gid=f"acc:{i}")  # fmt: skip
        ax_acc.plot(steps, rolling([p.acc for p in run]), color="tab:orange", lw=1.8,
                    label=f"acc (mean of the last {ACC_WINDOW})" if i == 0 else "_acc_mean", gid=f"acc_mean:{i}")  # fmt: skip
    handles = []
    if any(e.val_acc is not None for e in s.evals):
        ax_acc.plot([e.step for e in s.evals], [_nan(e.val_acc) for e in s.evals], color="tab:green",
                    marker="o", ms=5, lw=1, label="val acc", gid="val_acc")  # fmt: skip
    if any(e.accept_length is not None for e in s.evals) or s.best is not None:
        ax_len = ax_acc.twinx()
        ax_len.plot([e.step for e in s.evals], [_nan(e.accept_length) for e in s.evals], color="tab:purple",
                    marker="s", ms=4, lw=1, ls="--", label="accept length (simulated)", gid="acc_len")  # fmt: skip
        if s.best is not None:
            ax_len.plot([s.best.step], [s.best.accept_length], ls="none", marker="*", ms=14, color="tab:purple",
                        mec="black", mew=0.6, label=f"best ~{s.best.accept_length:.2f} at step {s.best.step:,}",
                        gid="best")  # fmt: skip
        ax_len.set_ylabel("accept length (SGLang's units)", color="tab:purple")
        ax_len.set_ylim(bottom=1.0, top=max([e.accept_length or 1.0 for e in s.evals] + [s.best.accept_length if s.best else 1.0]) * 1.15)  # fmt: skip
        ax_len.tick_params(axis="y", colors="tab:purple")
        handles = list(zip(*ax_len.get_legend_handles_labels(), strict=True))
    labelled = set()
    for m in s.marks:
        colour, ls, name = STYLE[m.kind]
        x = m.step if m.step is not None else 0
        for a in (ax, ax_acc):
            a.axvline(x, color=colour, ls=ls, lw=1.2, alpha=0.85,
                      label=name if a is ax and name not in labelled else "_" + name,
                      gid=f"mark:{m.kind}" if a is ax else None)  # fmt: skip
        labelled.add(name)
        above = m.kind == "resumed"  # a resume sits at the step its crash or stop was marked
        note = name if m.step is not None else f"{name} (before any step)"
        right = s.total_steps is not None and x > 0.9 * s.total_steps  # the text left of the line
        ax.annotate(note, (x, 0.12 if above else 0.03), xycoords=("data", "axes fraction"),
                    xytext=(-4 if right else 4, 0), textcoords="offset points", fontsize=7, color=colour,
                    ha="right" if right else "left")  # fmt: skip
    last = max([p.step for p in s.points] + [m.step or 0 for m in s.marks])
    ax.set_xlim(0, max(s.total_steps or 0, last) * 1.02 or 1)
    if s.total_steps:
        ax.axvline(s.total_steps, color="gray", ls=":", lw=1, label=f"total {s.total_steps:,} steps")
    ax.set_ylabel("loss")
    ax.set_ylim(0, max([p.loss for p in s.points if p.loss is not None], default=1.0) * 1.1 or 1.0)
    ax_acc.set_ylim(0, 1.05)
    ax_acc.set_ylabel("acc")
    ax_acc.set_xlabel("step")
    ax.set_title(title(s), loc="left", fontsize=11)
    ax.legend(loc="upper right", fontsize=7, ncol=2, framealpha=0.85)
    h, labels = ax_acc.get_legend_handles_labels()
    h += [x for x, _ in handles]
    labels += [y for _, y in handles]
    ax_acc.legend(h, labels, loc="lower right", fontsize=7, ncol=2, framealpha=0.85)
    fig.tight_layout()
    return fig


def render_png(s: TrainStory) -> bytes:
    return png(figure(s))
