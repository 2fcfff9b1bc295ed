"""Times, sizes and durations as the plain text says them: 3.3 TB, 2h49m, 14:32 UTC."""

from __future__ import annotations

import datetime as dt


def now_utc(now: dt.datetime | None) -> dt.datetime:
    return now or dt.datetime.now(dt.timezone.utc)


def human_bytes(n: int | float | None) -> str:
    """Decimal units, as disk vendors and `df -H` count: 3.3 TB, 128 MB."""
    if n is None:
        return "?"
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def human_duration(seconds: float | None) -> str:
    """2h49m, 12m, 40s, 1d3h."""
    if seconds is None:
        return "?"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    m, _ = divmod(s, 60)
    if m < 60:
        return f"{m}m{s % 60:02d}s" if m < 10 else f"{m}m"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h}h"


def clock(t: dt.datetime, now: dt.datetime) -> str:
    """14:32 UTC, with the date when it is not today."""
    t = t.astimezone(dt.timezone.utc)
    if t.date() == now.astimezone(dt.timezone.utc).date():
        return t.strftime("%H:%M UTC")
    return t.strftime("%b %d %H:%M UTC").replace(" 0", " ")
