"""A Slurm array task that is requeued (its time limit near, a preemption, a node failure) and
starts again: how often it has been, and why. The batch script (runner/engines/slurm_io.py)
traps Slurm's signal before the time limit, stops the rank, notes why in ``requeued.RANK`` beside
itself and requeues the task while ``[cluster] max_requeues`` allows; Slurm's own requeues (a
node failure, a preemption on a cluster that requeues) come with no note. Either way Slurm
counts them in ``SLURM_RESTART_COUNT``, which the rank reads as it starts: past the budget it
ends ``failed`` with the reason, and the operator's alert and Resume button take it from there.
"""

from __future__ import annotations

import os

NOTE = "requeued."  # + the rank: beside the batch script
SIGNALLED = "signalled before its time limit or a preemption"
BY_SLURM = "requeued by Slurm (a node failure or a preemption)"


def count() -> int:
    """How often Slurm has requeued this task (0: a first run, or not a Slurm task)."""
    try:
        return max(0, int(os.environ.get("SLURM_RESTART_COUNT") or 0))
    except ValueError:
        return 0


def note_path(script_dir: str, rank: int) -> str:
    return os.path.join(script_dir, f"{NOTE}{rank}")


def why(script_dir: str, rank: int, n: int) -> str | None:
    """Why the task was requeued the ``n``th time: the batch script's note when it requeued the
    task itself (the note names its count), else Slurm's own; None on a first run."""
    if n <= 0:
        return None
    said, reason = _note(script_dir, rank)
    return (reason or SIGNALLED) if said == str(n) else BY_SLURM


def _note(script_dir: str, rank: int) -> tuple[str, str]:
    """The batch script's last note: the requeue it counted and why ("" and "" when none)."""
    try:
        with open(note_path(script_dir, rank), encoding="utf-8") as f:
            said, _, reason = f.read().strip().partition(" ")
    except OSError:
        return "", ""
    return said, reason


def pending(script_dir: str, rank: int, n: int) -> bool:
    """The batch script requeued the task after the run that counted ``n`` requeues, and the next
    run has not begun: the task waits in the queue (stopped as at a `stop`, but coming back)."""
    said = _note(script_dir, rank)[0]
    return said.isdigit() and int(said) > n


def budget(cfg) -> int:
    """How often a task may be requeued: ``[cluster] max_requeues``, none with requeue off."""
    return cfg.cluster.max_requeues if cfg.cluster.requeue else 0


def stop_reason(cfg, n: int, at: int, last: int | None) -> str | None:
    """Why a task requeued ``n`` times is not run again (``past_budget``, ``stalled``), or None."""
    return past_budget(n, budget(cfg)) or stalled(n, at, last)


def stalled(n: int, at: int, last: int | None) -> str | None:
    """The reason a task requeued again stops when nothing was done since its last requeue
    (``last``: its progress then, ``at``: now): it fails the same way each time (a server that
    cannot come up before the signal, a sample that outlasts the time limit), so the rest of the
    budget would be spent the same way; the operator's alert comes now instead."""
    if n < 2 or last is None or at > last:
        return None
    return (
        f"requeued {n} times, the last two at {at:,} with nothing done between: it fails the "
        "same way each time, so not run again; see its Slurm log, then resume it"
    )


def past_budget(n: int, most: int) -> str | None:
    """The reason a task requeued ``n`` times stops, past ``[cluster] max_requeues`` = ``most``."""
    if n <= most:
        return None
    return (
        f"requeued {n} times, past [cluster] max_requeues = {most}: not run again; "
        "see its Slurm log, then resume it"
    )
