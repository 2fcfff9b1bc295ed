"""The real SGLang on a CPU (CI's lane, ``hsx demo --backend sglang``): its venv and its flags.

The venv holds the pinned SGLang on the torch pair it pins, apart from hsx's venv (SGLang
needs torchvision, which fails to import beside hsx's CPU torch wheel).

Built once, as every lane is (``runner.lanes``). ``python -m runner.sglang_cpu [ROOT]`` builds it
and prints its python.
"""

from __future__ import annotations

import os
import sys

from .lanes import Lane, to_stderr

MARKER = "hsx-sglang-ready"
# SGLang's CPU engine (``--device cpu`` alone fails in its rotary embedding), eager, small; its
# children forked from the launcher that already imported SGLang (tests/sglang_cpu/sitecustomize.py).
FORK_ENV = "HSX_SGLANG_CPU_FORK"
# A stop (SIGTERM to the server's group) ends the scheduler first, and SGLang takes that for a
# crash: with its GPU diagnostics on it sleeps 5 s "to let GPU activity settle" before it exits,
# every stop. No GPU here, and hsx reads a death's reason from the log, which says it either way.
NO_CRASH_DIAGNOSTICS = {"SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0"}
ENV = {"SGLANG_USE_CPU_ENGINE": "1", FORK_ENV: "1", **NO_CRASH_DIAGNOSTICS}
ARGS = [
    "--device", "cpu", "--sampling-backend", "pytorch", "--disable-cuda-graph",
    "--max-total-tokens", "8192", "--max-running-requests", "4",
]  # fmt: skip
# torch_native attention cannot read MLA's latent cache in prefill; intel_amx's prefill can
# (its decode is never used: every request is one prefill). Kimi-K2.5 is a DeepSeek-V3 inside.
_MLA = ["--prefill-attention-backend", "intel_amx", "--decode-attention-backend", "torch_native"]
ATTENTION = {"llama": ["--attention-backend", "torch_native"], "deepseek_v3": _MLA, "kimi_k25": _MLA}
# Serving an EAGLE-3 draft (shared/notes/sglang-0.5.23-eagle3-cpu.md): intel_amx for prefill and
# decode, whatever the target. torch_native has no EAGLE support (speculative/draft_utils.py
# refuses it), and ``--attention-backend intel_amx`` is quietly turned back into torch_native
# on a CPU without AMX; the split flags are not.
SPECULATIVE = ["--prefill-attention-backend", "intel_amx", "--decode-attention-backend", "intel_amx"]


def draft_args(draft: str, steps: int, topk: int, draft_tokens: int) -> list[str]:
    """extra_args that serve the EAGLE-3 draft in ``draft`` beside the target on this CPU: the
    lane's flags, the speculative attention and SGLang's speculation flags (steps/topk/draft
    tokens as SGLang names them; topk 1 is a chain, whose draft tokens are steps + 1)."""
    return [
        *ARGS, *SPECULATIVE, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
        "--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(draft_tokens),
    ]  # fmt: skip


def tp_env(tp: int, cpus: int | None = None) -> dict[str, str]:
    """What TP > 1 needs on SGLang's CPU engine (shared/notes/sglang-0.5.23-tp-kimi.md §1):
    each rank bound to its own cores (unset, SGLang asserts one NUMA node per rank), one OMP
    thread per core, and NCCL kept out: the lane's CUDA torch wheel ships libnccl, and SGLang's
    pynccl then calls ``torch.cuda.device(cpu)`` and crashes TP-group creation; a library that
    fails to load makes it fall back to gloo."""
    if tp <= 1:
        return {}
    cpus = cpus or os.cpu_count() or 1
    per = max(1, cpus // tp)
    first = [(r * per) % cpus for r in range(tp)]  # more ranks than cores: they share
    groups = [str(c) if per == 1 else f"{c}-{c + per - 1}" for c in first]
    return {
        "SGLANG_CPU_OMP_THREADS_BIND": "|".join(groups),
        "OMP_NUM_THREADS": str(per),
        "SGLANG_NCCL_SO_PATH": "/nonexistent/libnccl.so.2",
    }


def checkout_root() -> str | None:
    """The source checkout hsx runs from, or None for an installed hsx."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return root if os.path.exists(os.path.join(root, "pyproject.toml")) else None


def server_section(arch: str, python: str, kernels: str, tp: int = 1) -> dict:
    """[server] keys that run the patched SGLang on this CPU; ``kernels`` is the folder holding
    an ``sgl_kernel`` for the CPU engine (the tests' stand-in, or a compiled CPU build)."""
    return {
        "backend": "sglang",
        "python": python,
        "tp_size": tp,
        "extra_args": [*ARGS, *ATTENTION[arch], *(["--disable-custom-all-reduce"] if tp > 1 else [])],
        "env": {**ENV, **tp_env(tp), "PYTHONPATH": kernels},
    }


LANE = Lane("sglang-cpu", "SGLang CPU venv", MARKER)
venv_dir, python_of = LANE.venv_dir, LANE.python_of


def build(root: str, say=to_stderr) -> str:
    """Build the venv (several minutes, ~6 GB) unless built; return its python."""
    reqs = LANE.requirements()
    return LANE.build(
        root,
        lambda py: [
            ("torch and torchvision", [py, "-m", "pip", "install", "-q", *LANE.pinned("torch")]),
            ("SGLang (no deps)", [py, "-m", "pip", "install", "-q", "--no-deps", *LANE.pinned("sglang")]),
            (f"{len(reqs)} pure-Python dependencies", [py, "-m", "pip", "install", "-q", *reqs]),
        ],
        say=say,
    )


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else ".cache"))
