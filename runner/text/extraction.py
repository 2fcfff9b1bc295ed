"""The plain-text renderer: a status record, a verify or adopt report to terse text.

"progress?" in Slack, the terminal console, the watcher's posts and ``hsx-runner status`` all
answer with what this module returns, so the summary reads the same everywhere (Block Kit, a
chat-only dressing of the same text, stays in ``bot/render/summary.py``).
"""

from __future__ import annotations

import datetime as dt

from ..contract.ranks import NAMED, QUIET
from ..contract.regenerate import RegenerateRecord
from ..contract.replies import AdoptReport, CompactReport, PreflightReport, VerifyReport
from ..contract.status import (
    HANDOFF_PENDING,
    NOT_STARTED,
    STALE_S,
    Phase,
    StatusRecord,
    age_s,
    heartbeat_age,
    is_stale,
    parse_iso,
)
from .human import clock, human_bytes, human_duration, now_utc

MAX_ERROR_CHARS = 400
MAX_CLOCK_S = 1e9  # ~31 years: an ETA past it is shown without its clock time


def _since(iso: str | None, now: dt.datetime) -> str:
    t = parse_iso(iso)
    if t is None:
        return ""
    return f"since {clock(t, now)} ({human_duration((now - t).total_seconds())} ago)"


def percent(rec: StatusRecord) -> float:
    pct = 100.0 * rec.fraction
    # Never claim 100.0% while samples remain.
    if rec.done < rec.total and round(pct, 1) >= 100.0:
        return 99.9
    return pct


def progress_line(rec: StatusRecord) -> str:
    if not rec.total:
        return f"{rec.done:,} done (total not known yet)"
    line = f"{rec.done:,} / {rec.total:,} — {percent(rec):.1f}% done"
    if rec.adopted:  # taken over from another tool's output: done, but never part of the rate
        line += f" · {rec.adopted:,} adopted"
    if rec.failed:
        line += f" · {rec.failed:,} failed"
    if rec.truncated:
        line += f" · {rec.truncated:,} truncated to max_length"
    return line


def background_line(rec: StatusRecord) -> str:
    """A background verb while it runs: 'verify: 12,400 / 37,312 files, 1.4 GB/s, ETA 41m'."""
    bg = rec.background or {}
    if bg.get("state") != "running":
        return ""
    done, total = bg.get("done") or 0, bg.get("total")
    line = (
        f"{bg.get('verb', 'background')}: {done:,} / {total:,} files"
        if total
        else f"{bg.get('verb')}: starting"
    )
    if bg.get("rate_bytes_s"):
        line += f", {human_bytes(bg['rate_bytes_s'])}/s"
    if isinstance(bg.get("freed"), int) and bg["freed"] > 0:  # compact: the room made so far
        line += f", {human_bytes(bg['freed'])} freed"
    if bg.get("eta_s") is not None and total:
        line += f", ETA {human_duration(bg['eta_s'])}"
    return line


def handoff_line(rec: StatusRecord) -> str:
    """A done job's hand-off to training ([train] set): under way, or what came of it."""
    if rec.handoff == HANDOFF_PENDING:
        return "training: verifying the features first (the training preflight needs them verified)"
    return rec.handoff or ""


def background_result(rec: StatusRecord) -> str:
    """What a finished background verb found, once it has ended ('' while it runs)."""
    bg = rec.background or {}
    state, verb = bg.get("state"), bg.get("verb", "background job")
    if state == "done" and isinstance(bg.get("result"), dict):
        result = bg["result"]
        if verb == "adopt":
            text = render_adopt(AdoptReport.from_dict(result))
        elif verb == "compact":
            text = render_compact(CompactReport.from_dict(result))
        else:
            text = render_verify(VerifyReport.from_dict(result))
        return f"{verb} finished: " + text
    if state in ("failed", "crashed"):
        return f":x: {verb} {state}: {bg.get('error') or 'its process is gone'} (`/extract logs --crash`)"
    return ""


def render_detail(rec: StatusRecord, now: dt.datetime | None = None) -> str:
    """`/extract status --detail`: throughput, latency, what is in flight, the last commit."""
    now = now_utc(now)
    tps = f"{rec.tokens_per_s:,.0f} tokens/s" if rec.tokens_per_s is not None else "tokens/s: measuring"
    lat = (
        f"latency p50 {rec.latency_p50_s:.2f}s · p95 {rec.latency_p95_s:.2f}s"
        if rec.latency_p50_s is not None and rec.latency_p95_s is not None
        else "latency: measuring"
    )
    flight = f"{rec.in_flight} in flight"
    if rec.oldest_in_flight_idx is not None and rec.oldest_in_flight_s is not None:
        flight += f" (oldest: sample {rec.oldest_in_flight_idx}, {human_duration(rec.oldest_in_flight_s)})"
    age = age_s(rec.last_commit_at, now)
    last = f"last commit {human_duration(age)} ago" if age is not None else "no commit yet this run"
    median = f" · run median {rec.rate_median:.2f} samples/s" if rec.rate_median else ""
    return f"{tps} · {lat}\n{flight} · {last}{median}"


CRASH_HINT = "the runner died without a word: `/extract logs --crash` shows its last output"


def log_block(rec: StatusRecord, lines: int = 8) -> str:
    """The log lines a failure carries, as a code block (for alerts)."""
    fence = "`" * 3
    tail = [line.replace(fence, "'" * 3) for line in (rec.log_tail or [])[-lines:]]
    return f"{fence}\n" + "\n".join(tail) + f"\n{fence}" if tail else ""


def rate_line(rec: StatusRecord, now: dt.datetime) -> str:
    since = "since resume" if rec.done > rec.done_this_run else "since start"
    errors = f"{rec.errors_this_run:,} error{'' if rec.errors_this_run == 1 else 's'} {since}"
    if rec.rate is None:
        return f"{errors} · rate: measuring"
    rate = f"{rec.rate:.2f} samples/s" + (f" {rec.rate_trend}" if rec.rate_trend else "")
    if rec.eta_s is None:
        return f"{errors} · {rate}"
    if abs(rec.eta_s) > MAX_CLOCK_S:  # no calendar holds that moment: the duration says enough
        return f"{errors} · {rate} · ETA ~{human_duration(rec.eta_s)}"
    eta_at = now + dt.timedelta(seconds=rec.eta_s)
    return f"{errors} · {rate} · ETA ~{human_duration(rec.eta_s)} ({clock(eta_at, now)})"


def disk_line(rec: StatusRecord) -> str:
    d = rec.disk
    if not d.path and not d.used and not d.free:
        return "Disk: not reported"
    line = f"Disk {d.path or '?'}: {human_bytes(d.used)} used, {human_bytes(d.free)} free"
    if d.need is not None and d.need > 0:
        line += f" (~{human_bytes(d.need)} still needed)"
        if d.need > d.free:
            line += f" — short by {human_bytes(d.need - d.free)}"
    return line


def _error_tail(rec: StatusRecord) -> str:
    if not rec.last_error:
        return ""
    text = rec.last_error.strip().replace("```", "'''")
    if len(text) > MAX_ERROR_CHARS:
        text = "…" + text[-MAX_ERROR_CHARS:]
    return f"last error: {text}"


def stale_note(rec: StatusRecord, now: dt.datetime, stale_s: float = STALE_S) -> str:
    if is_stale(rec, now, stale_s):
        return (
            f"⚠ no heartbeat for {human_duration(heartbeat_age(rec, now))} — the runner may be hung or gone"
        )
    return ""


def _phase_lines(rec: StatusRecord, now: dt.datetime) -> list[str]:
    p = rec.phase
    if p is Phase.EXTRACTING:
        return [progress_line(rec), rate_line(rec, now), disk_line(rec)]
    if p is Phase.PREFLIGHT:
        return [f"Preflight: checking paths, disk, GPUs and the lock {_since(rec.phase_since, now)}".rstrip()]
    if p is Phase.STARTING_SERVER:
        srv = rec.server
        started = srv.started_at or rec.phase_since
        t = parse_iso(started)
        took = f" — {human_duration((now - t).total_seconds())} so far" if t else ""
        backend = f" ({srv.backend})" if srv.backend else ""
        lines = [f"Starting server{backend}{took}"]
        lines.append(f"now: {srv.activity}" if srv.activity else "now: waiting for the server to report")
        if srv.restarts:
            lines.append(restarts_line(srv))
        if rec.total:
            lines.append(progress_line(rec))
        return lines
    if p is Phase.SELF_TEST:
        return [f"Self-test: one request through the dump path {_since(rec.phase_since, now)}".rstrip()]
    if p is Phase.PAUSED:
        return [
            f"Paused: {rec.reason or 'no reason given'} {_since(rec.phase_since, now)}".rstrip(),
            progress_line(rec),
            disk_line(rec),
        ]
    if p is Phase.DONE:
        written = rec.done
        tail = f" · {rec.adopted:,} adopted" if rec.adopted else ""
        tail += f", {rec.failed:,} failed with a reason (see failed.jsonl)" if rec.failed else ""
        t = parse_iso(rec.phase_since)
        when = f" · finished {clock(t, now)} ({human_duration((now - t).total_seconds())} ago)" if t else ""
        return [
            f"Done: {written:,} / {rec.total:,} written{tail}{when}",
            disk_line(rec),
        ]
    if p in (Phase.FAILED, Phase.CRASHED):
        word = "FAILED" if p is Phase.FAILED else "CRASHED"
        where = f" in {rec.failed_in}" if rec.failed_in else ""
        head = f"{word}{where} {_since(rec.phase_since or rec.heartbeat_at, now)}".rstrip()
        if rec.reason:
            head += f": {rec.reason}"
        todo = rec.hint or (CRASH_HINT if p is Phase.CRASHED else "")
        todo = (
            f"what to do: {todo}; then `/extract resume`"
            if todo
            else "`/extract resume` continues where it stopped"
        )
        return [head, progress_line(rec), disk_line(rec), todo]
    if p is Phase.STOPPED and rec.reason == NOT_STARTED:
        return [f"Not started: {rec.total:,} samples to extract" if rec.total else "Not started",
                "`/extract start` begins the job"]  # fmt: skip
    if p is Phase.STOPPED:
        if rec.reason and rec.reason.startswith("adopted "):  # hsx-runner adopt, before any run
            why = f"— {rec.reason}"
        else:
            why = "on request"
        return [
            f"Stopped {why} {_since(rec.phase_since, now)}".rstrip(),
            progress_line(rec),
            "`/extract resume` continues where it stopped",
        ]
    return [f"phase {p.value}", progress_line(rec)]  # pragma: no cover - every phase is handled


def ranks_line(rec: StatusRecord | RegenerateRecord) -> str:
    """A cluster run (the extraction's, the regeneration's), when something is off:
    'ranks: 7 running, 1 failed — NODE_FAIL on gpu-3'."""
    ranks = rec.ranks or []
    if not ranks or all(r.state in QUIET for r in ranks):
        return ""
    counts = {w: sum(r.state == w for r in ranks) for w in NAMED}
    bad = [r for r in ranks if r.state not in NAMED]
    parts = [f"{n} {w.value}" for w, n in counts.items() if n] + ([f"{len(bad)} failed"] if bad else [])
    line = "ranks: " + ", ".join(parts)
    if bad:
        r = bad[0]
        line += f" — {r.word()}" + (f" on {r.node}" if r.node else "") + f" (rank {r.rank})"
    return line


def requeues_line(rec: StatusRecord | RegenerateRecord) -> str:
    """A cluster run whose tasks Slurm requeued: 'requeued: rank 0 twice (the last: signalled
    before its time limit or a preemption), rank 3 once (…)'."""
    times = {1: "once", 2: "twice"}
    each = [f"rank {r.rank} {times.get(r.requeues, f'{r.requeues} times')}"
            + (f" (the last: {r.requeued_for})" if r.requeued_for else "")
            for r in rec.ranks or [] if r.requeues]  # fmt: skip
    return "requeued: " + ", ".join(each) if each else ""


def restarts_line(srv) -> str:
    last = f" (last: {srv.last_death})" if srv.last_death else ""
    return f"server restarts: {srv.restarts}{last}"


def render_text(rec: StatusRecord, now: dt.datetime | None = None, stale_s: float = STALE_S) -> str:
    """The terse summary: what "progress?" answers."""
    now = now_utc(now)
    lines = _phase_lines(rec, now)
    if background_line(rec):
        lines.append(background_line(rec))
    if rec.handoff:
        lines.append(handoff_line(rec))
    if ranks_line(rec):
        lines.append(ranks_line(rec))
    if requeues_line(rec):
        lines.append(requeues_line(rec))
    if rec.phase is not Phase.EXTRACTING and rec.server.restarts and rec.phase is not Phase.STARTING_SERVER:
        lines.append(restarts_line(rec.server))
    for extra in (stale_note(rec, now, stale_s), _error_tail(rec) if rec.phase is not Phase.DONE else ""):
        if extra:
            lines.append(extra)
    return "\n".join(lines)


def indices_text(xs: list[int], limit: int = 10) -> str:
    shown = ", ".join(str(x) for x in xs[:limit])
    return shown + (f", … (+{len(xs) - limit})" if len(xs) > limit else "")


def render_verify(rep: VerifyReport) -> str:
    parts = {"missing": rep.missing, "corrupt": rep.corrupt, "failed": rep.failed}
    head = (
        f"verify: {rep.ok:,} / {rep.total:,} sound" if rep.total is not None else f"verify: {rep.ok:,} sound"
    )
    head += " — " + ", ".join(f"{len(v):,} {k}" for k, v in parts.items())
    lines = [head]
    for k, v in parts.items():
        if v:
            lines.append(f"{k}: {indices_text(v)}")
    if rep.unrecorded:
        lines.append(
            f"sound but not yet in the manifest (the next run records them): {indices_text(rep.unrecorded)}"
        )
    if rep.repaired is not None:
        lines.append(f"re-queued: {rep.repaired:,}")
    if not rep.unrecorded and not rep.missing and not rep.corrupt and rep.total is not None:
        lines.append(
            "every sample is present and sound"
            if not rep.failed
            else "every sample is present or failed with a reason"
        )
    return "\n".join(lines)


def render_adopt(rep: AdoptReport) -> str:
    lines = [
        f"adopt {rep.source}: {rep.adopted:,} adopted · {len(rep.bad):,} bad · "
        f"{rep.stray:,} stray (nothing deleted) · {rep.missing:,} missing"
    ]
    for i, why in list(rep.bad.items())[:10]:
        lines.append(f"bad {i}: {why[:200]}")
    if len(rep.bad) > 10:
        lines.append(f"… {len(rep.bad) - 10:,} more bad (`hsx adopt --json` lists them)")
    if rep.already:
        lines.append(f"already in the job, left alone: {rep.already:,}")
    if rep.left:
        lines.append(f"not adopted, left where they are (not the job's tree): {rep.left:,} files")
    if rep.loss_mask_differs:
        lines.append(f"adopted with a loss_mask unlike this job's: {indices_text(rep.loss_mask_differs)}")
    lines.append("`/extract resume` extracts the rest; the rate counts only extracted samples")
    return "\n".join(lines)


def render_compact(rep: CompactReport) -> str:
    if not rep.recoded and not rep.skipped:
        return f"compact: nothing to do, all {rep.already:,} samples are {rep.storage} already"
    freed = f"{human_bytes(rep.freed)} freed" if rep.freed >= 0 else f"{human_bytes(-rep.freed)} more used"
    lines = [
        f"compact to {rep.storage}: {rep.recoded:,} samples re-encoded, {freed} "
        f"({human_bytes(rep.bytes_before)} -> {human_bytes(rep.bytes_after)})"
        + (f" · {rep.already:,} already {rep.storage}" if rep.already else "")
    ]
    if rep.pinned_bits is not None:
        lines.append(f"every sample holds {rep.pinned_bits} mantissa bits now; dataset.json says so")
    for i, why in list(rep.skipped.items())[:10]:
        lines.append(f"left as it was, {i}: {why[:200]}")
    if len(rep.skipped) > 10:
        lines.append(f"… {len(rep.skipped) - 10:,} more left as they were (`hsx compact --json` lists them)")
    return "\n".join(lines)


HOLDERS_SHOWN = 8  # the rest are counted in one phrase, so a reply stays within Slack's limits


def gpu_list(gpus: list[int]) -> str:
    """0-5, 7"""
    runs: list[list[int]] = []
    for g in sorted(gpus):
        if runs and g == runs[-1][-1] + 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _holder_text(h: dict) -> str:
    gpus, mib = list(h.get("gpus") or []), int(h.get("mib") or 0)
    which = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} ({gpu_list(gpus)}), {mib:,} MiB"
    if h.get("unit"):
        return f"{h['unit']} holds {which}"
    if h.get("pid") is not None:
        return f"pid {h['pid']} {h.get('name', '?')} holds {which}"
    return (
        f"GPU{'s' if len(gpus) != 1 else ''} {gpu_list(gpus)}: {mib:,} of {int(h.get('total_mib') or 0):,} "
        "MiB in use by processes NVML does not show"
    )


def gpus_text(holders: list[dict], results: list[dict]) -> str:
    """Who holds the GPUs, per unit (or process), then what stopping each unit did: one phrase
    per holder and one per outcome, however many GPUs."""
    parts = [_holder_text(h) for h in holders[:HOLDERS_SHOWN]]
    rest = holders[HOLDERS_SHOWN:]
    if rest:
        gpus = {g for h in rest for g in h.get("gpus") or []}
        mib = sum(int(h.get("mib") or 0) for h in rest)
        parts.append(f"{len(rest)} more holders on {len(gpus)} GPUs ({gpu_list(list(gpus))}), {mib:,} MiB")
    outcomes: dict[str, list[str]] = {}  # units that ended alike are named together
    for r in results:
        outcomes.setdefault(str(r.get("detail", "")), []).append(str(r.get("unit", "?")))
    parts += [f"{', '.join(units)}: {what}" for what, units in outcomes.items()]
    return "; ".join(parts)


def render_preflight(rep: PreflightReport) -> str:
    lines = ["preflight: every check passes" if rep.ok else "preflight: a start would be refused"]
    for c in rep.checks:
        line = f"{'ok' if c.ok else '✗'} {c.name}: {c.detail}"
        if not c.ok and c.fix:
            line += f" — fix: {c.fix}"
        lines.append(line[:400])
    return "\n".join(lines)
