"""The draft's measurement in plain text: what ``/measure status`` and ``hsx measure status`` say
of its record (``runner.contract.measure``), an operator's in full, a member's with ``WITHHELD``
where an operator's has a path, the box's own words or the serve command.

Every accept length is in SGLang's units (completion tokens per verify step, the bonus token
counted): the measured one reads beside the training's simulated one."""

from __future__ import annotations

import datetime as dt

from ..contract.measure import NEAR_TIE, NONE, MeasureRecord
from ..contract.status import parse_iso
from .human import human_duration, now_utc
from .training import WITHHELD


def _rate(x: float) -> str:
    """Tokens/s as a person reads them: 1,234 on a GPU, 1.46 on this CPU's lane (not "1")."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


BENCHMARKS = {"mtbench": "MT-Bench", "gsm8k": "GSM8K", "math500": "Math500", "humaneval": "HumanEval",
              "livecodebench": "LiveCodeBench", "financeqa": "FinanceQA", "gpqa": "GPQA"}  # fmt: skip


def published_lines(rec: MeasureRecord) -> list[str]:
    """The published figures of ``[measure] reference`` beside this run's, a line per setting and
    batch size, and what differs: the published are other prompts (each benchmark's), served
    several at a time; this run's are its own prompts, one request at a time."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for p in rec.published:
        groups.setdefault((p.get("setting", "?"), p.get("batch", 0)), []).append(p)
    lines = []
    for (setting, batch), figs in groups.items():
        here = _figures(rec, setting)
        mine = here.get("accept_length") if here else None
        said = " · ".join(
            f"{BENCHMARKS.get(p.get('benchmark'), p.get('benchmark'))} {p.get('accept_length', 0):.2f}"
            + (f" ({p['speedup']:.2f}×)" if p.get("speedup") is not None else "")
            for p in figs
        )
        ours = f"{mine:.2f} here" if mine is not None else "not measured here yet"
        lines.append(f"published for {rec.reference} at {setting}, batch {batch}: {said} — {ours}")
    if lines:
        lines.append(
            "(published: each benchmark's prompts, several requests at a time; here: this run's "
            "prompts, one at a time, so set beside, not the same test)"
        )
    return lines


def _name(setting: str | None) -> str:
    return "the target alone" if setting == NONE else f"the draft at {setting or '?'}"


def _figures(rec: MeasureRecord, setting: str | None) -> dict | None:
    return next((s for s in rec.settings if s.get("setting") == setting), None)


def accept_line(rec: MeasureRecord) -> str:
    """``measured accept length 1.68 (3/1/4) · simulated 1.59``, both in SGLang's units ('' before
    either is known)."""
    bits = []
    if rec.accept_length is not None:
        bits.append(f"measured accept length {rec.accept_length:.2f} ({rec.best or '?'})")
    if rec.simulated is not None:
        bits.append(
            f"simulated {rec.simulated:.2f}" if bits else f"simulated accept length {rec.simulated:.2f}"
        )
    return (
        " · ".join(bits) + " (SGLang's units: tokens per verify step, the bonus token counted)"
        if bits
        else ""
    )


def speed_line(rec: MeasureRecord) -> str:
    """Tokens/s with the draft at the best setting and without it, and their ratio."""
    alone, best = _figures(rec, NONE), _figures(rec, rec.best)
    with_ = best and best.get("tokens_per_s")
    without = alone and alone.get("tokens_per_s")
    if not with_ and not without:
        return ""
    bits = [
        f"{_rate(with_)} tokens/s with the draft" if with_ else "",
        f"{_rate(without)} without" if without else "",
    ]
    ratio = best.get("speedup") if best else None
    if ratio is None and with_ and without:
        ratio = with_ / without
    bits.append(f"{ratio:.2f}×" if ratio is not None else "")
    return " · ".join(b for b in bits if b)


def setting_line(s: dict) -> str:
    """One setting's figures, and whether its outputs equal the target alone's."""
    name = "the target alone" if s.get("setting") == NONE else s.get("setting")
    bits = [f"{name}: {s.get('requests', 0):,} requests"]
    if s.get("accept_length") is not None:
        bits.append(f"accept length {s['accept_length']:.2f}")
    if s.get("accept_rate") is not None:
        bits.append(f"accept rate {s['accept_rate']:.2f}")
    if s.get("tokens_per_s") is not None:
        bits.append(f"{_rate(s['tokens_per_s'])} tokens/s")
    if s.get("speedup") is not None:
        bits.append(f"{s['speedup']:.2f}×")
    if s.get("ttft_s") is not None:
        bits.append(f"first token {s['ttft_s']:.2g}s (median)")
    differ = s.get("differ") or []
    if s.get("same") is not None:
        if not differ:
            bits.append(f"outputs equal ({s['same']:,})")
        near = [d for d in differ if _near(d)]
        if near:
            bits.append(f"{_count(near)} from the target alone's at a near-tie: {_where(near)}")
        if other := [d for d in differ if not _near(d)]:
            bits.append(f"{_count(other)} from the target alone's, not at a near-tie: {_where(other)} "
                        "— the draft's serving changed what the target says")  # fmt: skip
    return " · ".join(bits)


def _near(d: list) -> bool:
    return len(d) > 2 and d[2] is not None and d[2] <= NEAR_TIE


def _count(differ: list) -> str:
    return f"{len(differ):,} {'output differs' if len(differ) == 1 else 'outputs differ'}"


def _where(differ: list) -> str:
    """The first five: the prompt, the token, and how close the target's top two were there."""
    said = []
    for d in differ[:5]:
        apart = f" (top two {d[2]:.3g} apart)" if len(d) > 2 and d[2] is not None else ""
        said.append(f"prompt {d[0]} at token {d[1]}{apart}")
    more = f" and {len(differ) - 5:,} more" if len(differ) > 5 else ""
    return ", ".join(said) + more


def render_measure(rec: MeasureRecord, now: dt.datetime | None = None, full: bool = True) -> str:
    """The measurement in plain text: its phase, the server loading and for how long, requests
    done / total, the measured accept length beside the simulated one, tokens/s with and without
    the draft, each setting's figures and outputs, why it ended, the serve command. ``full``: an
    operator's, with the paths and the box's words; else the same with ``WITHHELD`` there."""
    now = now_utc(now)
    if not rec.started_at and rec.phase == "stopped":
        said = [accept_line(rec)] if rec.simulated is not None else []
        return "\n".join(["measurement: not started (`/measure start`)", *said])
    head = "measuring" if rec.phase == "measuring" else f"measurement {rec.phase.replace('_', ' ')}"
    if rec.total:
        head += f" — {rec.done:,} / {rec.total:,} requests ({100.0 * rec.done / rec.total:.1f}%)"
    lines = [head]
    if rec.active and rec.setting:
        since = parse_iso(rec.server_since)
        age = f" for {human_duration(max(0.0, (now - since).total_seconds()))}" if since else ""
        if rec.phase == "starting_server":
            doing = f" ({rec.server_activity})" if rec.server_activity else ""
            lines.append(f"starting the server for {_name(rec.setting)}{doing}{age}")
        elif rec.phase == "measuring":
            lines.append(f"measuring {_name(rec.setting)} (its server up{age})")
    if rec.restarts:
        last = f" (the last: {rec.last_death})" if full and rec.last_death else ""
        lines.append(f"server restarts: {rec.restarts}{last}")
    lines += [a] if (a := accept_line(rec)) else []
    lines += [s] if (s := speed_line(rec)) else []
    lines += [setting_line(s) for s in rec.settings]
    lines += published_lines(rec)
    if rec.failed:
        asked = "request" if rec.failed == 1 else "requests"
        last = f" (the last: {rec.last_error})" if full and rec.last_error else ""
        lines.append(f"{rec.failed:,} {asked} failed on their own, not measured again{last}")
    if rec.passed_over:
        rows = "row" if rec.passed_over == 1 else "rows"
        lines.append(
            f"{rec.passed_over:,} {rows} of the dataset passed over, not measured (the first: {rec.passed_over_first})"
        )
    if rec.phase in ("failed", "crashed", "stopped") and rec.reason:
        lines.append(f"{rec.phase}: {rec.reason}" if full else f"the measurement {rec.phase}; {WITHHELD}")
    if rec.phase in ("crashed", "stopped"):
        lines.append("`/measure resume` continues; finished requests are kept")
    if full:
        lines += [f"draft {rec.export_dir}"] if rec.export_dir else []
        lines += [f"results {rec.results or rec.run_dir}"] if rec.results or rec.run_dir else []
    if rec.serve_command:
        lines.append(f"serve it: {rec.serve_command}" if full else f"the serve command: {WITHHELD}")
    return "\n".join(lines)
