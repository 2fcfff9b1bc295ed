"""The output is what SpecForge trains on: bf16 files whatever the model computes in, and the
aux layers its draft config (or its default for the target) names."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import runner
from tests.runner.helpers import done_count, out_dir, tensors, verify

pytestmark = pytest.mark.slow  # real runner processes (torch)


def _desc(conf: str) -> dict:
    with open(os.path.join(out_dir(conf), "dataset.json")) as f:
        return json.load(f)


def test_files_are_bf16_when_the_model_computes_in_fp32(job):
    import torch
    from transformers import AutoModelForCausalLM

    conf = job(samples=3, server__dtype="float32")
    runner("run", "--config", conf, check=True)
    desc = _desc(conf)
    assert desc["dtype"] == "bfloat16" and desc["model_dtype"] == "float32", desc
    assert verify(conf)[1]["ok"] == 3
    model = AutoModelForCausalLM.from_pretrained(desc["model"], dtype=torch.float32)
    torch.set_num_threads(1)
    for i, t in tensors(conf).items():
        assert t["hidden_state"].dtype == t["aux_hidden_state"].dtype == torch.bfloat16, i
        with torch.inference_mode():
            hs = model(t["input_ids"][None], output_hidden_states=True).hidden_states
        want = torch.cat([hs[k + 1] for k in desc["aux_layer_ids"]], dim=-1).to(torch.bfloat16)
        assert torch.allclose(t["aux_hidden_state"].float(), want.float(), atol=2e-2, rtol=1e-2), i


def test_job_dtype_float32_keeps_fp32_and_is_pinned(job):
    import torch

    conf = job(samples=2, server__dtype="float32", job__dtype="float32")
    runner("run", "--config", conf, check=True)
    assert _desc(conf)["dtype"] == "float32"
    assert all(t["hidden_state"].dtype == torch.float32 for t in tensors(conf).values())
    text = open(conf).read()
    assert text.index('dtype = "float32"') < text.index("[server]")  # the first is [job]'s
    open(conf, "w").write(text.replace('dtype = "float32"', 'dtype = "bfloat16"', 1))
    p = runner("run", "--config", conf)
    assert p.returncode != 0 and "dtype: 'float32' -> 'bfloat16'" in p.stderr + p.stdout, p.stderr


def test_draft_config_ids_win_are_recorded_and_pinned(job, tmp_path):
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "num_hidden_layers": 1,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 5], "use_aux_hidden_state": True},
    }))  # fmt: skip
    conf = job(samples=2, job__draft_config=str(draft))
    runner("run", "--config", conf, check=True)
    desc = _desc(conf)
    assert desc["aux_layer_ids"] == [0, 2, 5] and desc["aux_layer_source"] == f"draft config {draft}", desc
    # a later run with other ids into the same output is refused, naming both
    draft.write_text(json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}))
    p = runner("run", "--config", conf)
    assert p.returncode != 0 and "aux_layer_ids: [0, 2, 5] -> [1, 3, 4]" in p.stderr + p.stdout, p.stderr
    assert done_count(conf) == 2


def test_aux_layer_ids_that_contradict_the_draft_config_are_refused(job, tmp_path):
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 5]}}))
    conf = job(samples=2, job__draft_config=str(draft), job__aux_layer_ids=[1, 3, 4])
    p = runner("preflight", "--config", conf)
    assert "differ from" in p.stdout + p.stderr and "[0, 2, 5]" in p.stdout + p.stderr, p.stdout
    p = runner("run", "--config", conf)
    assert p.returncode != 0 and "which SpecForge would train on" in p.stderr + p.stdout
