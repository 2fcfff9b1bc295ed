"""SpecForge's trainer on a CPU (CI's lane, the demo's ``[train]``): its venv and its shims.

The venv holds the ``specforge==0.2.0`` wheel with ``--no-deps`` on this machine's CPU torch,
apart from hsx's venv (its pins, torch 2.11 and sglang 0.5.14, would break extraction).
Built once under a folder keyed on the pin file's hash; the marker file is written last, so a
half-built venv is never taken for a built one. ``python -m runner.specforge_cpu [ROOT]``
builds it and prints its python.

The CPU shims (shared/notes/specforge-0.2.0-training.md) are here only: ``env()`` and
``yaml_keys()`` are applied for this lane, never on a GPU box.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from importlib import resources

MARKER = "hsx-specforge-ready"
SHIMS = "hsx-cpu-shims"  # a folder in the venv holding the sitecustomize below
# SpecForge's Triton LogSoftmaxLoss has no CPU kernel: the same maths in torch (its own
# reference, ``specforge.core._compute_loss``), put in place as the model module is imported.
# A sitecustomize on PYTHONPATH, so SpecForge's own launcher's children get it too.
SITECUSTOMIZE = '''\
"""hsx's CPU shim for SpecForge 0.2.0 (runner/specforge_cpu.py): a torch LogSoftmaxLoss."""
import importlib.abc
import sys

_NAME = "specforge.algorithms.eagle3.model"


class _TorchLogSoftmaxLoss:
    @staticmethod
    def apply(logits, target_p, position_mask):
        import torch

        logp = torch.log_softmax(logits.float(), dim=-1)
        return -(position_mask * target_p * logp).sum(-1).mean()


class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _NAME:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.LogSoftmaxLoss = _TorchLogSoftmaxLoss

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Patch())
'''


def pins() -> str:
    return resources.files("runner").joinpath("assets/specforge-cpu.txt").read_text()


def _pinned(text: str, tag: str) -> list[str]:
    for line in text.splitlines():
        if line.startswith(f"#@{tag} "):
            return line.split()[1:]
    raise ValueError(f"specforge-cpu.txt has no #@{tag} line")


def venv_dir(root: str) -> str:
    key = hashlib.sha256((pins() + SITECUSTOMIZE).encode()).hexdigest()[:12]
    return os.path.join(os.path.abspath(root), f"specforge-cpu-{key}")


def python_of(root: str) -> str | None:
    """The lane's interpreter if its venv is built, else None."""
    d = venv_dir(root)
    py = os.path.join(d, "bin", "python")
    return py if os.path.exists(os.path.join(d, MARKER)) and os.path.exists(py) else None


def shims_of(python: str) -> str | None:
    """The shim folder of the venv ``python`` belongs to, when it is this lane's venv."""
    d = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(python))), SHIMS)
    return d if os.path.exists(os.path.join(d, "sitecustomize.py")) else None


def env(python: str) -> dict[str, str]:
    """The trainer's environment on a CPU: no torch.compile, gloo, the loss shim."""
    shims = shims_of(python)
    if not shims:
        return {}
    return {"TORCHDYNAMO_DISABLE": "1", "SPECFORGE_DEVICE": "cpu", "PYTHONPATH": shims}


def yaml_keys() -> dict[str, dict]:
    """run.yaml keys the CPU needs (sdpa attention, DDP, no dataloader workers)."""
    return {
        "data": {"dataloader_num_workers": 0},
        "training": {"attention_backend": "sdpa", "fsdp_sharding": "NO_SHARD"},
    }


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build(root: str, say=_say) -> str:
    """Build the venv (a few minutes) unless built; return its python."""
    done = python_of(root)
    if done:
        return done
    d = venv_dir(root)
    text = pins()
    reqs = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    py = os.path.join(d, "bin", "python")
    steps = [
        ("creating the venv", [sys.executable, "-m", "venv", "--clear", d]),
        ("torch (CPU)", [py, "-m", "pip", "install", "-q", *_pinned(text, "torch")]),
        ("SpecForge (no deps)", [py, "-m", "pip", "install", "-q", "--no-deps", *_pinned(text, "specforge")]),
        (f"{len(reqs)} dependencies", [py, "-m", "pip", "install", "-q", *reqs, *_pinned(text, "torch")]),
    ]
    for i, (what, argv) in enumerate(steps, 1):
        say(f"SpecForge CPU venv {d}: step {i}/{len(steps)}: {what}")
        subprocess.run(argv, check=True)
    os.makedirs(os.path.join(d, SHIMS), exist_ok=True)
    with open(os.path.join(d, SHIMS, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE)
    with open(os.path.join(d, MARKER), "w") as f:
        f.write(text)
    return py


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else ".cache"))
