"""The pipeline in plain text, from ``hsx-runner pipeline status --json``'s reply: where it is
(stage k of n), each stage's phase, the stage under way's progress, why it ended and what each
done stage handed on."""

from __future__ import annotations

from ..contract.kinds import KINDS
from ..contract.status import NOT_STARTED
from .training import WITHHELD


def progress(name: str, s: dict | None) -> str:
    """How far a stage is, from its status reply: ``120 / 500 samples (24.0%)``, ``step 5 of 12``."""
    if not s:
        return ""
    if "total_steps" in s:  # a training's record counts steps
        step, total = s.get("step"), s.get("total_steps")
        return (
            f"step {step:,} of {total:,}"
            if isinstance(step, int) and isinstance(total, int) and total
            else ""
        )
    done, total = s.get("done"), s.get("total")
    if isinstance(done, int) and isinstance(total, int) and total:
        return (
            f"{done:,} / {total:,} {KINDS[name].unit if name in KINDS else ''} ({100.0 * done / total:.1f}%)"
        )
    return ""


def _phase(name: str, d: dict) -> str:
    s = d.get("current") if name == d.get("stage") else None
    phase = (d.get("phases") or {}).get(name) or "?"
    stages, stage = d.get("stages") or [], d.get("stage")
    if phase in ("stopped", "?") and stage in stages and stages.index(name) > stages.index(stage):
        return "waiting"  # not reached yet: its own record says stopped, or holds nothing
    if phase == "stopped" and (s or {}).get("reason") == NOT_STARTED:
        return "not started"
    return phase.replace("_", " ")


def where(d: dict) -> str:
    """``stage 2 of 4: extract (extracting, 120 / 500 samples (24.0%))``."""
    stages, stage = d.get("stages") or [], d.get("stage")
    if not stage or stage not in stages:
        return ""
    k = stages.index(stage) + 1
    prog = progress(stage, d.get("current"))
    return f"stage {k} of {len(stages)}: {stage} ({_phase(stage, d)}{', ' + prog if prog else ''})"


def line(d: dict) -> str:
    bits = [f"pipeline {d.get('phase', '?')}", where(d), d.get("reason") or ""]
    return " · ".join(b for b in bits if b)


def render_pipeline(d: dict, full: bool = True) -> str:
    """The pipeline first, then each stage's phase; ``full``: with the box's words and paths, else
    ``WITHHELD`` where its reason was."""
    if not d.get("started_at") and d.get("phase") == "stopped":
        return "pipeline: not started (`/pipeline start`)"
    lines = [f"pipeline {d.get('phase', '?').replace('_', ' ')}" + (f" — {w}" if (w := where(d)) else "")]
    lines.append(" → ".join(f"{n} {_phase(n, d)}" for n in d.get("stages") or []))
    lines += d.get("healed") or []  # "extract crashed at …, resumed 1 of 3": no paths in them
    eta = (d.get("current") or {}).get("eta_s")
    if isinstance(eta, (int, float)) and d.get("phase") == "running":
        from .human import human_duration

        lines.append(
            f"this stage's ETA ~{human_duration(eta)}; the stages after it are timed once they start"
        )
    if d.get("phase") in ("failed", "crashed", "stopped") and d.get("reason"):
        lines.append(f"{d['phase']}: {d['reason']}" if full else f"the pipeline {d['phase']}; {WITHHELD}")
    if d.get("phase") in ("failed", "crashed", "stopped"):
        lines.append("`/pipeline start` resumes it where it stopped")
    if full:
        lines += [f"handed on: {h}" for h in d.get("handed") or []]
    return "\n".join(lines)
