"""Which interpreter trains: ``[train] python`` as written, or with ``python = "auto"`` the venv
hsx builds for this box, SpecForge's own pins where NVML sees a GPU (``runner.specforge_gpu``),
the CPU lane elsewhere (``runner.specforge_cpu``). A lane's venv is built on first use, in named
steps, so the first start or ``train setup`` shows its progress."""

from __future__ import annotations

import os

from .. import specforge_cpu, specforge_gpu
from ..contract.config import AUTO_PYTHON as AUTO
from ..lanes import default_root, to_stderr
from ..serve import gpus

LANES = (specforge_gpu, specforge_cpu)


def for_box() -> tuple[object, str]:
    """The lane this box trains in, and why."""
    devices, err = gpus.survey()
    if devices:
        return specforge_gpu, f"{len(devices)} GPU(s) seen"
    return specforge_cpu, f"no GPU seen ({err or 'NVML lists none'})"


def resolve(python: str, root: str | None = None) -> str:
    """``python`` itself, or for ``auto`` this box's lane's python under ``root`` (built or not)."""
    if python != AUTO:
        return python
    lane, _ = for_box()
    return os.path.join(lane.venv_dir(root or default_root()), "bin", "python")


def resolve_config(cfg) -> None:
    """``cfg``'s ``[train] python = "auto"`` made the interpreter it names on this box."""
    cfg.train.python = resolve(cfg.train.python, cfg.train.envs_dir or None)


def lane_of(python: str):
    """The lane whose venv ``python`` is, else None (an interpreter of the operator's own)."""
    return next((m for m in LANES if m.root_of(python)), None)


def ensure(python: str, say=to_stderr) -> None:
    """Build ``python``'s lane on first use when it names one; any other interpreter is the
    operator's and is only checked (control.check_python)."""
    lane = lane_of(python)
    root = lane.root_of(python) if lane else None
    if lane and lane.python_of(root) is None:
        say(f"building the {lane.LANE.title} once: {lane.venv_dir(root)}")
        lane.build(root, say=say)
