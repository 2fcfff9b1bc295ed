"""The regeneration in plain text: what ``/regenerate status`` and ``hsx regenerate status`` say of
its record (``runner.contract.regenerate``), an operator's in full, a member's with ``WITHHELD``
where an operator's has a path or the box's own words."""

from __future__ import annotations

import datetime as dt

from ..contract.regenerate import RegenerateRecord
from ..contract.status import parse_iso
from .extraction import ranks_line
from .human import human_bytes, human_duration, now_utc
from .training import WITHHELD


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def line(rec: RegenerateRecord) -> str:
    """One line: the phase, rows done of all, failed, tokens/s, ETA, the reason."""
    bits = (
        rec.phase.replace("_", " "),
        rec.total and f"{rec.done:,}/{rec.total:,} rows",
        rec.failed and f"{rec.failed:,} not regenerated",
        rec.cut and f"{rec.cut:,} cut at the token limit",
        rec.active and rec.tokens_per_s is not None and f"{_rate(rec.tokens_per_s)} tokens/s",
        rec.active and rec.eta_s is not None and f"ETA ~{human_duration(rec.eta_s)}",
        rec.phase == "done" and rec.output and f"output {rec.output}",
        rec.reason,
    )
    return " · ".join(b for b in bits if b)


def render_regenerate(rec: RegenerateRecord, now: dt.datetime | None = None, full: bool = True) -> str:
    """The regeneration in plain text: phase, rows done / total, failed rows, tokens/s and ETA,
    the server loading and for how long, restarts, why it ended, the files. ``full``: an
    operator's, with the paths and the box's words; else ``WITHHELD`` there."""
    now = now_utc(now)
    if not rec.started_at and rec.phase == "stopped":
        return "regeneration: not started (`/regenerate start`)"
    head = "regenerating" if rec.phase == "regenerating" else f"regeneration {rec.phase.replace('_', ' ')}"
    if rec.total:
        head += f" — {rec.done:,} / {rec.total:,} rows ({100.0 * rec.done / rec.total:.1f}%)"
    lines = [head]
    rate = []
    if rec.tokens_per_s is not None:
        rate.append(f"{_rate(rec.tokens_per_s)} tokens/s")
    if rec.rows_per_s is not None:
        rate.append(f"{_rate(rec.rows_per_s)} rows/s")
    if rec.eta_s is not None and rec.active:
        rate.append(f"ETA ~{human_duration(rec.eta_s)}")
    if rate:
        lines.append(" · ".join(rate))
    if ranks_line(rec):  # on Slurm, when a rank is not running or done: 'ranks: 1 done, 1 failed — …'
        lines.append(ranks_line(rec))
    if rec.failed:
        last = f" (the last: {rec.last_error})" if full and rec.last_error else ""
        rows = "1 row" if rec.failed == 1 else f"{rec.failed:,} rows"
        lines.append(f"{rows} not regenerated, each listed with its reason{last}")
    if rec.cut:
        rows = "1 row" if rec.cut == 1 else f"{rec.cut:,} rows"
        lines.append(f"{rows} kept with an answer cut at its token limit ([regenerate] max_new_tokens, "
                     "or the room [job] max_length left)")  # fmt: skip
    if rec.phase == "starting_server":
        since = parse_iso(rec.server_since)
        age = f" for {human_duration(max(0.0, (now - since).total_seconds()))}" if since else ""
        doing = f" ({rec.server_activity})" if rec.server_activity else ""
        lines.append(f"starting the target's server{doing}{age}")
    if rec.restarts:
        last = f" (the last: {rec.last_death})" if full and rec.last_death else ""
        lines.append(f"server restarts: {rec.restarts}{last}")
    if rec.disk_free is not None:
        where = f" on {rec.disk_path}" if full and rec.disk_path else ""
        lines.append(f"disk: {human_bytes(rec.disk_free)} free{where}")
    if rec.phase in ("failed", "crashed", "stopped") and rec.reason:
        lines.append(f"{rec.phase}: {rec.reason}" if full else f"the regeneration {rec.phase}; {WITHHELD}")
    if rec.phase in ("crashed", "stopped", "failed"):
        lines.append("`/regenerate resume` continues; committed rows are kept")
    if full:
        lines += [f"from {rec.source}"] if rec.source else []
        if rec.output:
            lines.append(f"{'written' if rec.phase == 'done' else 'to be written'}: {rec.output}")
        lines += [f"rows not regenerated: {rec.failures}"] if rec.failures and rec.failed else []
    return "\n".join(lines)
