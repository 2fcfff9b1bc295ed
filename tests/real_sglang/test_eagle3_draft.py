"""The offline EAGLE-3 draft builder (eagle3_draft.py): deterministic from its seed, shaped for
the target, and the echo draft is the target's own last layer (test_measure.py serves it)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.real_sglang import eagle3_draft


def test_same_seed_same_bytes_and_the_loaders_names(demo_assets, tmp_path):
    model = str(demo_assets / "model")
    a, b, c = (
        eagle3_draft.build(model, str(tmp_path / n), seed=s) for n, s in (("a", 0), ("b", 0), ("c", 1))
    )
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "model.safetensors").read_bytes() != (
        tmp_path / "c" / "model.safetensors"
    ).read_bytes()
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    target = json.loads((demo_assets / "model" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    assert cfg["draft_vocab_size"] == cfg["vocab_size"] == target["vocab_size"]
    w = load_file(str(tmp_path / "a" / "model.safetensors"))
    h = target["hidden_size"]
    assert w["fc.weight"].shape == (h, 3 * h) and w["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * h
    assert w["lm_head.weight"].shape == (target["vocab_size"], h)
    assert torch.equal(w["d2t"], torch.zeros(target["vocab_size"], dtype=torch.int64)) and bool(
        w["t2d"].all()
    )
    assert "embed_tokens.weight" not in w  # SGLang shares the target's


def test_the_echo_draft_is_the_targets_last_layer(demo_assets, tmp_path):
    model = str(demo_assets / "model")
    w = load_file(
        eagle3_draft.build(model, str(tmp_path / "e"), aux_layer_ids=(1, 3, 6), echo=True)
        + "/model.safetensors"
    )
    t = {k: v.float() for k, v in load_file(str(demo_assets / "model" / "model.safetensors")).items()}
    h = t["model.norm.weight"].shape[0]
    assert torch.equal(w["midlayer.mlp.down_proj.weight"], t["model.layers.7.mlp.down_proj.weight"])
    q = w["midlayer.self_attn.q_proj.weight"]
    assert torch.equal(q[:, h:], t["model.layers.7.self_attn.q_proj.weight"]) and not q[:, :h].any()
    assert torch.equal(w["fc.weight"][:, 2 * h :], torch.eye(h)) and not w["fc.weight"][:, : 2 * h].any()
    assert torch.equal(w["lm_head.weight"], t["lm_head.weight"])
    with pytest.raises(ValueError, match="last aux layer must be 6"):
        eagle3_draft.build(model, str(tmp_path / "x"), aux_layer_ids=(1, 3, 5), echo=True)
