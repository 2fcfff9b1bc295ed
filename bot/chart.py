"""`/extract chart`: samples done over time, with the rate, as a PNG (matplotlib, Agg)."""

from __future__ import annotations

import datetime as dt
import io

from runner.contract.status import parse_iso

Point = tuple[dt.datetime, int, "float | None"]


def points_from_events(events: list[dict]) -> list[Point]:
    """Every event that carries an integer ``done`` is a point; others are ignored."""
    pts = []
    for e in events:
        if not isinstance(e, dict):
            continue
        t, done = parse_iso(e.get("t") if isinstance(e.get("t"), str) else None), e.get("done")
        if t is None or not isinstance(done, int) or isinstance(done, bool):
            continue
        rate = e.get("rate")
        pts.append(
            (t, done, float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None)
        )
    pts.sort(key=lambda p: p[0])
    return pts


def caption(points: list[Point]) -> str:
    (t0, d0, _), (t1, d1, _) = points[0], points[-1]
    span = (t1 - t0).total_seconds()
    avg = (d1 - d0) / span if span > 0 else 0.0
    return (
        f"samples done {d0:,} → {d1:,} from {t0:%b %d %H:%M} to {t1:%b %d %H:%M} UTC "
        f"(average {avg:.2f} samples/s)"
    )


def render_png(points: list[Point]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.5), dpi=100)
    ax = fig.add_subplot()
    ts = [p[0] for p in points]
    ax.plot(ts, [p[1] for p in points], color="tab:blue", label="samples done")
    ax.set_ylabel("samples done")
    ax.set_xlabel("UTC")
    rated = [(p[0], p[2]) for p in points if p[2] is not None]
    if rated:
        ax2 = ax.twinx()
        ax2.plot([r[0] for r in rated], [r[1] for r in rated], color="tab:orange", alpha=0.7)
        ax2.set_ylabel("samples/s", color="tab:orange")
        ax2.set_ylim(bottom=0)
    fig.autofmt_xdate()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
