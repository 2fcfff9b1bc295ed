"""What a killed supervisor's launch left of a run: SpecForge's ranks, found by their command
line (the run's run.yaml and specforge.cli), ended before anything trains into the run again."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from ..procs import cmdline, pids


def end(root: str) -> list[int]:
    """SIGKILL what a killed supervisor's launch left of this run (ranks torchrun gives 30 s to
    end, which may save and rotate checkpoints meanwhile); what was killed. Called with the run's
    lock free or held: nothing else may train into it then."""
    yaml = os.path.join(root, "run.yaml")
    deadline = time.monotonic() + 30
    killed: set[int] = set()
    while found := [p for p in pids() if {yaml, "specforge.cli"} <= set(cmdline(p))]:
        for p in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
                killed.add(p)
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return sorted(killed)
