"""The real pinned SGLang, patched, on this CPU: its own venv (built by scripts/test.sh under
.cache/), the CPU engine, and the test-only ``sgl_kernel`` stand-in in tests/sglang_cpu.
Skipped where the venv is not built; CI builds it and sets HSX_REQUIRE_SGLANG_CPU=1."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from runner import sglang_cpu
from runner.data import targets, tiny
from tests.conftest import ROOT
from tests.sshd import skip_or_fail

KERNELS = os.path.join(ROOT, "tests", "sglang_cpu")
DTYPE = {"llama": "bfloat16", "deepseek_v3": "float32", "kimi_k25": "float32"}


@pytest.fixture(scope="session")
def sglang_python():
    py = sglang_cpu.python_of(os.path.join(ROOT, ".cache"))
    if py is None:
        skip_or_fail(
            "the SGLang CPU venv is not built (python -m runner.sglang_cpu .cache)", "HSX_REQUIRE_SGLANG_CPU"
        )
    return py


@pytest.fixture(scope="session")
def models(demo_assets, tmp_path_factory):
    """{arch: model dir}: the demo's tiny Llama (8 layers, bf16), a tiny DeepSeek-V3 (8 layers,
    MLA, MoE with a shared expert, first layer dense) sharing its tokenizer, and the Kimi-K2.5
    fixture (runner/data/targets.py: that DeepSeek-V3 inside the wrapper, a vision tower, tiktoken). The DeepSeek model is
    float32: in bf16 a few tokens per sample fall on near-tied expert scores that the two
    backends' roundings break differently (cosine ~0.99 on those tokens, 1.0 on the rest)."""
    llama = demo_assets / "model"
    ds = tmp_path_factory.mktemp("deepseek_v3")
    for name in os.listdir(llama):
        if not name.startswith(("model", "config", "generation")):
            shutil.copy(llama / name, ds / name)
    with open(llama / "config.json") as f:
        vocab = json.load(f)["vocab_size"]
    tiny.build_model(0, vocab, str(ds), "deepseek_v3", dtype=DTYPE["deepseek_v3"])
    kimi = tmp_path_factory.mktemp("kimi_k25")
    targets.build("kimi-k2.5", str(kimi / "model"), str(kimi / "data.jsonl"), 4, 0, dtype=DTYPE["kimi_k25"])
    return {"llama": str(llama), "deepseek_v3": str(ds), "kimi_k25": str(kimi / "model")}
