"""Every model class of the pinned SGLang that can capture EAGLE-3 layers, driven through its
real set_eagle3_layers_to_capture (tests/sglang_cpu/layer_ids_probe.py, in the SGLang venv):
hsx makes each capture exactly the outputs of the layers dataset.json names, or refuses."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import ROOT
from tests.real_sglang.conftest import KERNELS

SHIFT_ONLY_FROM_1 = (
    "deepseek_v2.DeepseekV2ForCausalLM",
    "glm4_moe_lite.Glm4MoeLiteForCausalLM",
    "kimi_k25.KimiK25ForConditionalGeneration",
)


COUNTS = [8, 61]  # 61: Kimi-K2.5 / DeepSeek-V3's layer count


@pytest.fixture(scope="module")
def probed(sglang_python):
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": os.pathsep.join([ROOT, KERNELS])}
    p = subprocess.run(
        [sglang_python, os.path.join(KERNELS, "layer_ids_probe.py"), *map(str, COUNTS)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


@pytest.fixture(params=COUNTS)
def probe(request, probed):
    return request.param, probed[str(request.param)]


def test_every_class_captures_exactly_the_named_layers_or_refuses(probe):
    n, classes = probe
    assert len(classes) >= 25, sorted(classes)
    assert "llama.LlamaForCausalLM" in classes and "kimi_k25.KimiK25ForConditionalGeneration" in classes
    for cls, rows in classes.items():
        for key, row in rows.items():
            ids = [int(x) for x in key.split(",")]
            want = [i + 1 for i in ids]
            assert "error" not in row, (cls, key, row)
            if "refused" in row:
                assert cls in SHIFT_ONLY_FROM_1 and ids[0] == 0, (cls, key, row)
                assert "cannot capture the outputs of layers" in row["refused"]
                continue
            assert row["captured"] == want, (cls, key, row)
            assert row["flagged"] in ([], want), (cls, key, row)


def test_deepseek_and_kimi_stock_rule_is_one_off_and_fixed(probe):
    n, classes = probe
    for cls in SHIFT_ONLY_FROM_1:
        rows = classes[cls]
        default = f"1,{n // 2 - 1},{n - 4}"
        assert rows[default]["stock"] == rows[default]["captured"]  # the default was always right
        assert rows["2,3,5"]["stock"] == [2, 3, 5]  # stock: each layer one off, no error
        assert rows["2,3,5"]["captured"] == [3, 4, 6] and rows["2,3,5"]["arg"] == [3, 4, 6]
        assert "refused" in rows["0,2,5"]
    llama = classes["llama.LlamaForCausalLM"]
    assert all(r["arg"] == [int(x) for x in k.split(",")] for k, r in llama.items())
