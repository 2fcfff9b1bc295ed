"""`/extract chart`: the job's story as one PNG (matplotlib, Agg).

``story()`` reads the runner's events (and the watcher's points) into runs of samples done,
the rate, the total, the projected finish and the marks an operator looks for: each crash (the
runner's last sign of life, then the time it was down), stall, pause, stop and resume.
``figure()`` draws it; ``caption()`` says it in a line. Events from before the progress
events carried ``total`` and ``eta_s`` (and the phase events ``done``) still chart: the rate
is then taken from the points themselves."""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass, field

from runner.contract.status import Phase, StatusRecord, parse_iso
from runner.text.human import human_duration

ENDED = {"done", "failed", "stopped"}  # a run that wrote one of these ended on its own
Point = tuple[dt.datetime, int]


@dataclass
class Mark:
    kind: str  # crash, stall, pause, stop, failed, resume, done
    t: dt.datetime
    done: int
    until: dt.datetime | None = None  # a span's end: crash (down), stall, pause
    note: str = ""


@dataclass
class Story:
    job: str = ""
    total: int | None = None
    done: int = 0
    phase: str | None = None
    runs: list[list[Point]] = field(default_factory=list)  # one line per runner process
    rates: list[list[tuple[dt.datetime, float]]] = field(default_factory=list)  # per run
    marks: list[Mark] = field(default_factory=list)
    finish: dt.datetime | None = None  # projected from the current rate, while extracting
    rate: float | None = None  # the current rate

    @property
    def points(self) -> list[Point]:
        return [p for run in self.runs for p in run]

    def count(self, kind: str) -> int:
        return sum(m.kind == kind for m in self.marks)


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _clean(events: list[dict]) -> list[tuple[dt.datetime, dict]]:
    """Timed events, oldest first, each once (the same file may be read by two routes)."""
    seen, out = set(), []
    for e in events:
        if not isinstance(e, dict):
            continue
        t = parse_iso(e.get("t") if isinstance(e.get("t"), str) else None)
        key = (e.get("t"), e.get("event"), e.get("phase"), e.get("done"))
        if t is None or key in seen:
            continue
        seen.add(key)
        out.append((t, e))
    out.sort(key=lambda te: te[0])
    return out


class _Reader:
    """One pass over the events; the state of the run being read."""

    def __init__(self, stall_s: float):
        self.s = Story()
        self.stall_s = stall_s
        self.phase: str | None = None
        self.last: tuple[dt.datetime, int] | None = None  # the last sign of life and its count
        self.flat: Point | None = None  # since when done has not moved, while extracting
        self.open: Mark | None = None  # a pause not yet over

    def new_run(self, t: dt.datetime, done: int | None) -> None:
        s = self.s
        if s.runs and s.runs[-1]:
            self.end_flat()
            lt, ld = self.last or (t, 0)
            down = f"down {human_duration((t - lt).total_seconds())}"
            if self.phase not in ENDED and self.phase is not None:  # it never said it stopped: it died
                s.marks.append(Mark("crash", lt, ld, until=t, note=down))
            elif s.marks and s.marks[-1].kind in ("stop", "failed") and s.marks[-1].until is None:
                s.marks[-1].until = t  # stopped (or failed) until this run began
            s.marks.append(Mark("resume", t, done if done is not None else ld))
        s.runs.append([])
        s.rates.append([])
        self.open = None

    def point(self, t: dt.datetime, done: int) -> None:
        s = self.s
        if not s.runs:
            s.runs.append([])
            s.rates.append([])
        s.runs[-1].append((t, done))
        self.last = (t, done)
        if self.phase != "extracting":
            return
        if self.flat is None or done != self.flat[1]:
            self.end_flat(t)
            self.flat = (t, done)

    def end_flat(self, until: dt.datetime | None = None) -> None:
        """Close a stretch without progress: a stall if it lasted stall_s (until the next
        count, or the last point seen in it)."""
        if self.flat is not None and self.last is not None:
            end = until or self.last[0]
            if (end - self.flat[0]).total_seconds() >= self.stall_s:
                quiet = human_duration((end - self.flat[0]).total_seconds())
                self.s.marks.append(Mark("stall", self.flat[0], self.flat[1], until=end, note=quiet))
        self.flat = None

    def phase_event(self, t: dt.datetime, phase: str, done: int | None, reason: str) -> None:
        if phase in ("preflight", "starting_server"):  # a runner enters these once, as it begins
            if self.phase not in ("preflight", None) or (self.s.runs and self.s.runs[-1]):
                self.new_run(t, done)
        self.end_flat(t)
        here = done if done is not None else (self.last[1] if self.last else 0)
        if self.open is not None and phase != "paused":
            self.open.until = t
            if phase == "extracting":
                self.s.marks.append(Mark("resume", t, here, note="after pause"))
            self.open = None
        if phase == "paused" and self.open is None:
            self.open = Mark("pause", t, here, note=reason)
            self.s.marks.append(self.open)
        elif phase in ("stopped", "failed", "done"):
            note = "" if reason == "stopped on request" else reason  # the usual stop needs no words
            self.s.marks.append(Mark("stop" if phase == "stopped" else phase, t, here, note=note))
        self.phase = phase
        if done is not None:
            self.point(t, done)
        else:
            self.last = (t, here)


def story(events: list[dict], rec: StatusRecord | None = None, stall_s: float = 300.0) -> Story:
    r = _Reader(stall_s)
    s = r.s
    for t, e in _clean(events):
        kind, done = e.get("event"), _int(e.get("done"))
        if _int(e.get("total")):
            s.total = e["total"]
        if kind == "phase" and isinstance(e.get("phase"), str):
            r.phase_event(t, e["phase"], done, str(e.get("reason") or ""))
            continue
        if done is None:
            continue
        r.point(t, done)
        rate = _num(e.get("rate"))
        if rate is not None and kind in ("progress", None):  # None: a watcher's point
            s.rates[-1].append((t, rate))
    r.end_flat()
    if r.open is not None:
        r.open.until = r.last[0] if r.last else r.open.t
    for run, rates in zip(s.runs, s.rates, strict=True):
        if not rates:  # events from before the rate was written: the points' own slope
            rates += [
                (b[0], (b[1] - a[1]) / (b[0] - a[0]).total_seconds())
                for a, b in zip(run, run[1:], strict=False)
                if b[0] > a[0] and b[1] >= a[1]
            ]
    s.done = s.points[-1][1] if s.points else 0
    s.phase = r.phase
    s.rate = s.rates[-1][-1][1] if s.rates and s.rates[-1] else None
    if rec is not None:
        _apply_record(s, rec)
    if s.phase == "extracting" and s.rate and s.total and s.points:
        # the record's ETA where there is one (it may count tokens), else the current rate's
        eta = rec.eta_s if rec is not None and rec.eta_s is not None else max(0, s.total - s.done) / s.rate
        s.finish = s.points[-1][0] + dt.timedelta(seconds=eta)
    return s


def _apply_record(s: Story, rec: StatusRecord) -> None:
    """The current record: the job's name, its total and count now, and a crash the events
    cannot show (a dead runner writes nothing)."""
    s.job = rec.job or s.job
    s.total = rec.total or s.total
    s.phase = rec.phase.value
    t = parse_iso(rec.heartbeat_at)
    if t is not None and (not s.runs or not s.points or t > s.points[-1][0]):
        if not s.runs:
            s.runs.append([])
            s.rates.append([])
        s.runs[-1].append((t, rec.done))
    s.done = rec.done
    if rec.rate is not None and rec.phase == Phase.EXTRACTING:
        s.rate = rec.rate
    if rec.phase == Phase.CRASHED and s.points:
        t, d = s.points[-1]
        s.marks.append(Mark("crash", t, d, note="runner gone"))


def _span(t0: dt.datetime, t1: dt.datetime) -> str:
    t0, t1 = t0.astimezone(dt.timezone.utc), t1.astimezone(dt.timezone.utc)
    if t0.date() != t1.date():
        return f"{t0:%b %d %H:%M} to {t1:%b %d %H:%M} UTC"
    return f"{t0:%b %d %H:%M:%S} to {t1:%H:%M:%S} UTC"


def title(s: Story) -> str:
    if not s.total:
        return f"{s.job or 'job'}: {s.done:,} samples done ({s.phase or '?'})"
    pct = 100.0 * s.done / s.total
    if s.done < s.total:
        pct = min(pct, 99.9)  # never 100% while samples remain
    return f"{s.job or 'job'}: {s.done:,} / {s.total:,} done ({pct:.1f}%) — {s.phase or '?'}"


def caption(s: Story) -> str:
    pts = s.points
    (t0, d0), (t1, d1) = pts[0], pts[-1]
    parts = [
        f"{title(s)}",
        f"samples done {d0:,} → {d1:,}, {_span(t0, t1)} ({human_duration((t1 - t0).total_seconds())})",
    ]
    told = [
        f"{n} {kind}" + ("" if n == 1 else "es" if kind == "crash" else "s")
        for kind in ("crash", "stall", "pause", "stop", "resume")
        if (n := s.count(kind))
    ]
    down = sum((m.until - m.t).total_seconds() for m in s.marks if m.kind == "crash" and m.until)
    if down:
        told[0] += f" (down {human_duration(down)})"
    if told:
        parts.append(", ".join(told))
    if s.finish is not None:
        parts.append(f"{s.rate:.2f} samples/s now, projected finish {s.finish:%b %d %H:%M} UTC")
    return " · ".join(parts)


STYLE = {  # kind: (marker, colour, span colour or None)
    "crash": ("X", "tab:red", "tab:red"),
    "stall": ("v", "tab:orange", "tab:orange"),
    "pause": ("P", "goldenrod", "gold"),
    "stop": ("s", "dimgray", "gray"),
    "failed": ("X", "darkred", "gray"),
    "resume": ("^", "tab:green", None),
    "done": ("*", "tab:green", None),
}
SPAN_LABEL = {"crash": "down (crashed)", "stall": "stalled", "pause": "paused", "stop": "not running",
              "failed": "not running"}  # fmt: skip


def figure(s: Story):
    """The matplotlib Figure (not drawn): tests read its lines, marks and text."""
    import matplotlib.dates as mdates

    fig = new_figure((10, 4.8))
    ax = fig.add_subplot()
    for i, run in enumerate(s.runs):
        if run:
            ax.plot([p[0] for p in run], [p[1] for p in run], color="tab:blue", lw=2,
                    label="samples done" if i == 0 else "_run")  # fmt: skip
    if s.total:
        ax.axhline(s.total, color="gray", ls="--", lw=1, label=f"total {s.total:,}")
    last = s.points[-1]
    if s.finish is not None and s.total:
        ax.plot([last[0], s.finish], [last[1], s.total], color="tab:blue", ls=":", lw=2,
                label=f"projected finish {s.finish:%b %d %H:%M} UTC")  # fmt: skip
    labelled = set()
    for m in s.marks:
        marker, colour, shade = STYLE[m.kind]
        if shade and m.until is not None and m.until > m.t:
            name = SPAN_LABEL[m.kind]
            ax.axvspan(m.t, m.until, color=shade, alpha=0.18, lw=0,
                       label=name if name not in labelled else "_" + name)  # fmt: skip
            labelled.add(name)
        ax.plot([m.t], [m.done], ls="none", marker=marker, ms=11, color=colour, mec="black", mew=0.6,
                label=m.kind if m.kind not in labelled else "_" + m.kind, gid=f"mark:{m.kind}")  # fmt: skip
        labelled.add(m.kind)
        below = m.kind == "resume"  # a resume sits where a stop or crash was just marked
        ax.annotate(m.kind if not m.note else f"{m.kind}\n{m.note[:40]}", (m.t, m.done),
                    xytext=(7, -16 if below else 8), textcoords="offset points", fontsize=7, color=colour)  # fmt: skip
    ax.set_ylim(0, max(s.total or 0, max(p[1] for p in s.points)) * 1.08 or 1)
    ax.set_ylabel("samples done")
    ax.set_xlabel("UTC")
    ax.set_title(title(s), loc="left", fontsize=11)
    if any(s.rates):
        ax2 = ax.twinx()
        for i, rates in enumerate(s.rates):
            if rates:
                ax2.plot([r[0] for r in rates], [r[1] for r in rates], color="tab:orange", lw=1, alpha=0.8,
                         marker="." if len(rates) == 1 else None, label="samples/s" if i == 0 else "_rate")  # fmt: skip
        ax2.set_ylabel("samples/s", color="tab:orange")
        ax2.set_ylim(bottom=0, top=max(r[1] for rates in s.rates for r in rates) * 1.3 or 1)
        ax2.tick_params(axis="y", colors="tab:orange")
        h2, l2 = ax2.get_legend_handles_labels()
    else:
        h2, l2 = [], []
    h1, l1 = ax.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=7, ncol=2, framealpha=0.85)
    loc = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc, tz=dt.timezone.utc))
    fig.tight_layout()
    return fig


def new_figure(size: tuple[float, float]):
    """A matplotlib Figure off any screen (Agg): the bot has none."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=size, dpi=100)


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def render_png(s: Story) -> bytes:
    return png(figure(s))
