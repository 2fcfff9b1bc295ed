"""SpecForge's trainer on a CPU (CI's lane, the demo's ``[train]``): its venv and its shims.

The venv holds the ``specforge==0.2.0`` wheel with ``--no-deps`` on this machine's CPU torch, and
the lane's needs, from the lock hsx ships (``assets/specforge-cpu.lock``, each file's sha256),
apart from hsx's venv (its pins, torch 2.11 and sglang 0.5.14, would break extraction); a GPU
box's venv, with those pins, is ``runner.specforge_gpu``.
Built once, as every lane is (``runner.lanes``); ``python -m runner.specforge_cpu [ROOT]``
builds it and prints its python.

The CPU shims (shared/notes/specforge-0.2.0-training.md) are here only: ``env()`` and
``yaml_keys()`` are applied for this lane, never on a GPU box.
"""

from __future__ import annotations

import os
import sys

from .lanes import Lane, to_stderr

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


def _pace():
    """hsx demo's pace: each optimizer step takes at least HSX_DEMO_TRAIN_PACE_S seconds, so a
    person can watch the training, kill it and resume it."""
    import os
    import time

    try:
        pace = float(os.environ.get("HSX_DEMO_TRAIN_PACE_S") or 0)
    except ValueError:
        pace = 0.0
    if pace > 0:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(lambda *_: time.sleep(pace))


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
            _pace()

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Patch())
'''


LANE = Lane("specforge-cpu", "SpecForge CPU venv", MARKER, extra_key=SITECUSTOMIZE)
venv_dir, python_of, root_of = LANE.venv_dir, LANE.python_of, LANE.root_of


def shims_of(python: str) -> str | None:
    """The shim folder of the venv ``python`` belongs to, when it is this lane's venv."""
    d = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(python))), SHIMS)
    return d if os.path.exists(os.path.join(d, "sitecustomize.py")) else None


def env(python: str) -> dict[str, str]:
    """The trainer's environment on a CPU: no torch.compile, gloo, the loss shim, and one OpenMP
    thread per process. The demo's draft is too small for threads to pay, and on a shared 2-core
    box two spinning ones made each step ~10x slower (0.7 steps/s against 8, bench.train)."""
    shims = shims_of(python)
    if not shims:
        return {}
    return {
        "TORCHDYNAMO_DISABLE": "1",
        "SPECFORGE_DEVICE": "cpu",
        "PYTHONPATH": shims,
        "OMP_NUM_THREADS": "1",
    }


def yaml_keys() -> dict[str, dict]:
    """run.yaml keys the CPU needs (sdpa attention, DDP, no dataloader workers)."""
    return {
        "data": {"dataloader_num_workers": 0},
        "training": {"attention_backend": "sdpa", "fsdp_sharding": "NO_SHARD"},
    }


def build(root: str, say=to_stderr) -> str:
    """Build the venv (a few minutes) unless built; return its python."""

    def shims(d: str) -> None:
        os.makedirs(os.path.join(d, SHIMS), exist_ok=True)
        with open(os.path.join(d, SHIMS, "sitecustomize.py"), "w") as f:
            f.write(SITECUSTOMIZE)

    # torch by version, from wherever this machine's pip finds its CPU build (no registry file
    # is the CPU build everywhere); then SpecForge without its CUDA pins and the lane's needs,
    # each file checked against the lock
    return LANE.build(
        root,
        lambda py: [
            ("torch (CPU)", [py, "-m", "pip", "install", "-q", *LANE.pinned("torch")]),
            (
                f"SpecForge and its needs, {LANE.locked_count()} hash-checked wheels",
                LANE.locked(py, "-q", "--no-deps"),
            ),
        ],
        finish=shims,
        say=say,
    )


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else ".cache"))
