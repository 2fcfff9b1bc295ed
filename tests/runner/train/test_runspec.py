"""The [train] config and the run dir's files (runner/train/runspec.py): run.yaml, the target view, the draft, the CPU lane's keys."""

from __future__ import annotations

import json
import os

import pytest

from runner import specforge_cpu
from runner.contract.errors import ConfigError
from runner.train import runspec

from .units import _cfg, _model


def test_train_config_defaults_keep_a_crash_from_losing_everything(tmp_path):
    t = _cfg(tmp_path).train
    assert t.save_interval > 0 and t.max_checkpoints >= 2 and t.log_interval <= 10
    for bad in ({"save_interval": 0}, {"max_checkpoints": 1}, {"specforge": 3}, {"epoch": 2}):
        with pytest.raises(ConfigError):
            _cfg(tmp_path, **bad)
    cfg = _cfg(tmp_path, run_dir="runs/a", python="venv/bin/python")
    assert cfg.train.run_dir == str(tmp_path / "runs/a") and cfg.train.python == str(
        tmp_path / "venv/bin/python"
    )
    assert runspec.run_dir(_cfg(tmp_path)) == str(tmp_path / "out-train")  # beside out, never inside


def test_the_run_dir_holds_a_target_view_with_an_index_and_a_draft_with_the_extractions_layers(tmp_path):
    _model(tmp_path)
    cfg = _cfg(tmp_path, save_interval=5, specforge={"training": {"ttt_length": 3}})
    (tmp_path / "out" / "dataset.json").write_text(
        json.dumps({"aux_layer_ids": [1, 3, 4], "max_length": 256})
    )
    paths, spec = runspec.prepare(cfg)
    index = json.load(open(os.path.join(paths.target, "model.safetensors.index.json")))
    assert index["weight_map"]["lm_head.weight"] == "model.safetensors"
    assert os.path.islink(os.path.join(paths.target, "model.safetensors"))
    assert not os.listdir(tmp_path / "model") == os.listdir(paths.target)  # the model dir is untouched
    draft = json.load(open(paths.draft))
    assert draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert draft["hidden_size"] == 64 and draft["architectures"] == ["LlamaForCausalLMEagle3"]
    written = json.load(open(paths.yaml))
    assert written == spec and spec["model"]["target_model_path"] == paths.target
    assert spec["model"]["embedding_key"] == "model.embed_tokens.weight" and spec["data"]["max_length"] == 256
    assert spec["training"]["ttt_length"] == 3 and spec["training"]["save_interval"] == 5  # operator's last
    assert spec["training"]["max_checkpoints"] == 2 and spec["run_id"] == "hsx-eagle3"
    assert spec["data"]["hidden_states_path"] == str(tmp_path / "out")


def test_the_cpu_shims_reach_only_the_cpu_lanes_own_venv(tmp_path):
    _model(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "dataset.json").write_text(json.dumps({"aux_layer_ids": [1, 3, 4]}))
    lane = tmp_path / "lane"
    (lane / "bin").mkdir(parents=True)
    (lane / specforge_cpu.SHIMS).mkdir()
    (lane / specforge_cpu.SHIMS / "sitecustomize.py").write_text(specforge_cpu.SITECUSTOMIZE)
    for python, cpu in ((str(tmp_path / "gpu-venv/bin/python"), False), (str(lane / "bin/python"), True)):
        cfg = _cfg(tmp_path, python=python, run_dir=str(tmp_path / f"run-{cpu}"))
        paths, spec = runspec.prepare(cfg)
        env = runspec.command(cfg, paths, None)["env"]
        assert ("SPECFORGE_DEVICE" in env) is cpu and ("TORCHDYNAMO_DISABLE" in env) is cpu
        assert (env.get("OMP_NUM_THREADS") == "1") is cpu  # one thread per trainer process on a CPU
        assert (spec["training"].get("attention_backend") == "sdpa") is cpu
        assert ("dataloader_num_workers" in spec["data"]) is cpu


def _wrapper(tmp_path, top_hidden: bool):
    """Kimi-K2.5's layout: a wrapper config around a DeepSeek-V3 text_config (remote code named in
    both), the weights under language_model. and a vision tower beside them."""
    m = tmp_path / "kimi"
    m.mkdir()
    text = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64,
            "vocab_size": 300, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128,
            "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}}  # fmt: skip
    wrapper = {"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"],
               "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"}, "text_config": text,
               "vision_config": {"hidden_size": 16}}  # fmt: skip
    if top_hidden:  # a remote-code config that answers the text model's size at the top too
        wrapper.update(hidden_size=64, vocab_size=300)
    (m / "config.json").write_text(json.dumps(wrapper))
    names = ("language_model.model.embed_tokens.weight", "language_model.lm_head.weight",
             "vision_tower.patch_embed.proj.weight", "mm_projector.proj.0.weight")  # fmt: skip
    raw = json.dumps({n: {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]} for n in names}).encode()
    (m / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 4)
    (m / "configuration_kimi_k25.py").write_text("")
    return m


@pytest.mark.parametrize("top_hidden", [False, True])
def test_a_wrappers_target_view_is_its_text_model_with_the_prefixed_keys(tmp_path, top_hidden):
    model = _wrapper(tmp_path, top_hidden)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "dataset.json").write_text(json.dumps({"aux_layer_ids": [1, 3, 4]}))
    cfg = _cfg(tmp_path, specforge={})
    cfg.job.model = str(model)
    paths, spec = runspec.prepare(cfg)
    view = json.load(open(os.path.join(paths.target, "config.json")))
    assert view["model_type"] == "deepseek_v3" and view["architectures"] == ["DeepseekV3ForCausalLM"]
    assert view["hidden_size"] == 64 and "auto_map" not in view and "vision_config" not in view
    assert not os.path.islink(os.path.join(paths.target, "config.json"))
    assert os.path.islink(os.path.join(paths.target, "model.safetensors"))
    index = json.load(open(os.path.join(paths.target, "model.safetensors.index.json")))
    assert index["weight_map"]["language_model.lm_head.weight"] == "model.safetensors"
    assert spec["model"]["embedding_key"] == "language_model.model.embed_tokens.weight"
    assert spec["model"]["lm_head_key"] == "language_model.lm_head.weight"
    assert json.load(open(paths.draft))["hidden_size"] == 64  # the text model's, for the draft too
    assert json.load(open(model / "config.json"))["model_type"] == "kimi_k25"  # the target is untouched


def test_gpus_and_nodes_are_specforges_topology_and_set_the_world_and_steps(tmp_path):
    _model(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "dataset.json").write_text(json.dumps({"aux_layer_ids": [1, 3, 4]}))
    cfg = _cfg(tmp_path, gpus=2, epochs=3)
    paths, spec = runspec.prepare(cfg)
    assert spec["deployment"]["trainer"] == {"nnodes": 1, "nproc_per_node": 2}
    assert runspec.world(spec) == 2 and runspec.total_steps(spec, 13) == 7 * 3  # each rank: ceil(13 / 2)
    assert _cfg(tmp_path).train.gpus == 1
    for bad, says in (({"gpus": 0}, "gpus must be at least 1"), ({"nodes": 2}, 'engine = "slurm"')):
        with pytest.raises(ConfigError, match=says):
            _cfg(tmp_path, **bad)
