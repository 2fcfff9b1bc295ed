"""SpecForge's trainer on a GPU box: a venv of its own holding the ``specforge==0.2.0`` wheel
with the wheel's own pins (torch 2.11.0 with its CUDA wheels, transformers 5.8.1, sglang 0.5.14),
apart from hsx's, whose pins they would break. Installed from the lock hsx ships
(``assets/specforge-gpu.lock``: every package pinned, each file's sha256; ``scripts/lock-lanes.sh``).
No shims: the CPU's are ``runner.specforge_cpu``'s and never reach this venv. Built once, as every lane is (``runner.lanes``)."""

from __future__ import annotations

import sys

from .lanes import Lane, to_stderr

LANE = Lane("specforge-gpu", "SpecForge venv (its own pins)", "hsx-specforge-ready")
venv_dir, python_of, root_of = LANE.venv_dir, LANE.python_of, LANE.root_of


def steps(py: str) -> list[tuple[str, list[str]]]:
    # pip's own lines (each wheel it collects) are the progress of a several-GB install: no -q
    return [
        (
            f"specforge 0.2.0 with its own pins, {LANE.locked_count()} hash-checked wheels (several GB)",
            LANE.locked(py),
        )
    ]


def build(root: str, say=to_stderr) -> str:
    """Build the venv (a download of several GB) unless built; return its python."""
    return LANE.build(root, steps, say=say)


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else ".cache"))
