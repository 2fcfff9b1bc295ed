"""Tiny offline copies of real targets' model directories: the file names, config nesting,
tokenizer kind, special tokens and chat template of each family, with small random weights.
``hsx demo --target NAME`` and the tests build them; nothing is downloaded.

- ``llama3``: Llama-3.1 Instruct (fast byte-level BPE, header tokens, ``<|eot_id|>``).
- ``qwen3``: Qwen3 (``<|im_start|>``/``<|im_end|>``, ``<think>`` blocks after the last query).
- ``gpt-oss``: gpt-oss (harmony channels, reasoning in ``thinking``, alternating sliding
  attention, MoE); its layer count shows SpecForge's gpt-oss layer choice.
- ``kimi-k2.5``: Kimi-K2.5 (a multimodal wrapper whose ``text_config`` is a DeepSeek-V3 with MLA
  and MoE; a tiktoken tokenizer that is remote code through ``auto_map``; role tokens and
  ``<think>`` blocks).
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import tempfile
from importlib import resources

from . import tiny

NAMES = ("kimi-k2.5", "llama3", "qwen3", "gpt-oss")
BPE_SIZE = 700

LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] | trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

QWEN3_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- set ns = namespace(found=false, last_query=messages|length - 1) %}"
    "{%- for m in messages[::-1] %}{%- if not ns.found and m.role == 'user' %}"
    "{%- set ns.found = true %}{%- set ns.last_query = messages|length - 1 - loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- set reasoning = m.reasoning_content if m.reasoning_content is defined and m.reasoning_content is not none else '' %}"
    "{%- if loop.index0 > ns.last_query and (loop.last or reasoning) %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + m.content.lstrip('\\n') }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + m.content }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

GPT_OSS_TEMPLATE = (
    "{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\\n"
    "Knowledge cutoff: 2024-06\\n\\nReasoning: medium\\n\\n# Valid channels: analysis, commentary, final. "
    "Channel must be included for every message.<|end|>' }}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}{{- '<|start|>developer<|message|># Instructions\\n\\n' + m.content + '<|end|>' }}"
    "{%- elif m.role == 'user' %}{{- '<|start|>user<|message|>' + m.content + '<|end|>' }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- if loop.last and not add_generation_prompt %}"
    "{%- if m.thinking is defined and m.thinking %}{{- '<|start|>assistant<|channel|>analysis<|message|>' + m.thinking + '<|end|>' }}{%- endif %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|return|>' }}"
    "{%- else %}{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)

KIMI_TEMPLATE = (
    "{%- macro role_open(m) -%}{%- set name = m.get('name') or m['role'] -%}"
    "{%- if m['role'] == 'user' -%}<|im_user|>{{ name }}<|im_middle|>"
    "{%- elif m['role'] == 'assistant' -%}<|im_assistant|>{{ name }}<|im_middle|>"
    "{%- else -%}<|im_system|>{{ name }}<|im_middle|>{%- endif -%}{%- endmacro -%}"
    "{%- set ns = namespace(last=-1) -%}"
    "{%- for i in range(messages|length - 1, -1, -1) -%}"
    "{%- if ns.last < 0 and messages[i]['role'] == 'assistant' and not messages[i].get('tool_calls') -%}"
    "{%- set ns.last = i -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}{{ role_open(m) }}"
    "{%- if m['role'] == 'assistant' -%}"
    "{%- if loop.index0 <= ns.last or (thinking is defined and thinking is false) -%}<think></think>{{ m['content'] }}"
    "{%- else -%}<think>{{ m.get('reasoning_content', '') }}</think>{{ m['content'] }}{%- endif -%}"
    "{%- else -%}{{ m['content'] }}{%- endif -%}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>"
    "{%- if thinking is defined and thinking is false -%}<think></think>{%- else -%}<think>{%- endif -%}{%- endif -%}"
)

# Kimi's special tokens: offset from the first id after the BPE ranks.
KIMI_SPECIALS = {
    0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
    6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
    11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
    14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
    18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>",
    22: "<think>", 23: "</think>", 254: "[UNK]", 255: "[PAD]",
}  # fmt: skip

FAMILIES = {
    "llama3": {
        "specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                     "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                     "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>"],
        "bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "pad": None, "template": LLAMA3_TEMPLATE,
        "config": {
            "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 256, "rope_type": "llama3"},
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        },
    },
    "qwen3": {
        "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
        "bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>", "template": QWEN3_TEMPLATE,
        "config": {
            "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": 8, "attention_bias": False,
        },
    },
    "gpt-oss": {
        "specials": ["<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>",
                     "<|call|>", "<|constrain|>"],
        "bos": None, "eos": "<|return|>", "pad": "<|endoftext|>", "template": GPT_OSS_TEMPLATE,
        "config": {
            "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": 64,
            "intermediate_size": 64, "num_hidden_layers": 12, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 150000.0,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 8.0,
                             "original_max_position_embeddings": 256, "rope_type": "yarn", "truncate": False},
            "layer_types": ["sliding_attention", "full_attention"] * 6, "sliding_window": 16,
            "num_local_experts": 4, "num_experts_per_tok": 2, "experts_per_token": 2, "attention_bias": True,
            "swiglu_limit": 7.0, "tie_word_embeddings": False, "router_aux_loss_coef": 0.9,
        },
    },
}  # fmt: skip


def conversations(seed: int, n: int, reasoning: bool) -> list[dict]:
    """The demo's conversations; with ``reasoning``, assistant turns carry their thinking too."""
    rows = tiny.make_conversations(seed, n)
    rng = random.Random(seed + 1)
    if reasoning:
        for r in rows:
            for t in r["conversations"]:
                if t["role"] == "assistant" and rng.random() < 0.7:
                    t["reasoning_content"] = "Let me think. " + t["content"][: rng.randint(10, 60)]
    return rows


def _train_bpe(texts: list[str], specials: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_SIZE, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _fast_tokenizer(family: dict, texts: list[str], out_dir: str):
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=_train_bpe(texts, family["specials"]),
        bos_token=family["bos"], eos_token=family["eos"], pad_token=family["pad"],
    )  # fmt: skip
    fast.chat_template = family["template"]
    fast.save_pretrained(out_dir)
    return len(fast)


KIMI_CODE = str(resources.files("runner").joinpath("assets/tokenization_kimi.py"))
KIMI_CONFIG_CODE = str(resources.files("runner").joinpath("assets/configuration_kimi_k25.py"))


def _kimi_code():
    """The tokenizer code the Kimi fixture ships (a file of its own, as remote code is)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hsx_tokenization_kimi", KIMI_CODE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kimi_tokenizer(texts: list[str], out_dir: str) -> tuple[int, dict]:
    """tiktoken.model (BPE ranks, base64 bytes per line) + the remote-code tokenizer class."""
    bpe = _train_bpe(texts, [])
    unbyte = {c: b for b, c in _kimi_code()._byte_chars().items()}
    ranks = sorted(bpe.get_vocab().items(), key=lambda kv: kv[1])
    with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
        for rank, (token, _) in enumerate(ranks):
            f.write(f"{base64.b64encode(bytes(unbyte[c] for c in token)).decode()} {rank}\n")
    base = len(ranks)
    shutil.copyfile(KIMI_CODE, os.path.join(out_dir, "tokenization_kimi.py"))
    decoder = {
        str(base + k): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": True}
        for k, name in KIMI_SPECIALS.items()
    }  # fmt: skip
    config = {
        "tokenizer_class": "TikTokenTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                                      "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"],
        "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "model_max_length": 1048576, "clean_up_tokenization_spaces": False,
        "chat_template": KIMI_TEMPLATE,
    }  # fmt: skip
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    ids = {name: base + k for k, name in KIMI_SPECIALS.items()}
    return base + 256, ids


def _write_json(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2)


def _build_weights(config: dict, vocab: int, out_dir: str, seed: int) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    cfg = {**config, "vocab_size": vocab, "torch_dtype": "bfloat16"}
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg.pop("model_type"), **cfg))
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)


# The tiny vision tower: the hub's key names (SGLang 0.5.23's KimiK25 loader maps wqkv./wo. and
# mm_projector.proj.0/2 onto its modules and refuses a name it does not know). Head dim 8: its
# 2-D rope needs a multiple of 4; 2 heads: divisible by TP 2.
KIMI_VISION = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
               "patch_size": 14, "init_pos_emb_height": 4, "init_pos_emb_width": 4, "init_pos_emb_time": 4,
               "merge_kernel_size": [2, 2]}  # fmt: skip


def _vision_shapes(text_hidden: int) -> dict[str, tuple[int, ...]]:
    v = KIMI_VISION
    h, m, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    merged = h * v["merge_kernel_size"][0] * v["merge_kernel_size"][1]
    out = {
        "vision_tower.patch_embed.proj.weight": (h, 3, p, p), "vision_tower.patch_embed.proj.bias": (h,),
        "vision_tower.patch_embed.pos_emb.weight": (v["init_pos_emb_height"], v["init_pos_emb_width"], h),
        "vision_tower.encoder.final_layernorm.weight": (h,), "vision_tower.encoder.final_layernorm.bias": (h,),
        "mm_projector.pre_norm.weight": (h,), "mm_projector.pre_norm.bias": (h,),
        "mm_projector.proj.0.weight": (merged, merged), "mm_projector.proj.0.bias": (merged,),
        "mm_projector.proj.2.weight": (text_hidden, merged), "mm_projector.proj.2.bias": (text_hidden,),
    }  # fmt: skip
    for i in range(v["num_hidden_layers"]):
        b = f"vision_tower.encoder.blocks.{i}."
        for name, shape in (
            ("norm0.weight", (h,)), ("norm0.bias", (h,)), ("norm1.weight", (h,)), ("norm1.bias", (h,)),
            ("wqkv.weight", (3 * h, h)), ("wqkv.bias", (3 * h,)), ("wo.weight", (h, h)), ("wo.bias", (h,)),
            ("mlp.fc0.weight", (m, h)), ("mlp.fc0.bias", (m,)), ("mlp.fc1.weight", (h, m)), ("mlp.fc1.bias", (h,)),
        ):  # fmt: skip
            out[b + name] = shape
    return out


def _kimi_model(vocab: int, ids: dict, out_dir: str, seed: int, dtype: str = "bfloat16") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tiny.build_model(seed, vocab, tmp, "deepseek_v3", dtype=dtype, overrides={"num_hidden_layers": 8})
        wrap_kimi(tmp, out_dir, seed, dtype, ids)
    _write_json(
        os.path.join(out_dir, "generation_config.json"),
        {"bos_token_id": ids["[BOS]"], "eos_token_id": ids["<|im_end|>"], "max_length": 262144},
    )


def wrap_kimi(text_dir: str, out_dir: str, seed: int, dtype: str, ids: dict | None = None) -> None:
    """The DeepSeek-V3 in ``text_dir`` as Kimi-K2.5's checkpoint lays it out in ``out_dir``: its
    weights under ``language_model.``, a tiny vision tower, the wrapper's config.json (with
    ``text_config.model_type`` ``kimi_k2``, as on the hub) and config class. SGLang 0.5.23 loads
    it as ``KimiK25ForConditionalGeneration``; ``ids``: the special tokens' ids, else the text
    config's own and the last id as the media placeholder."""
    import torch
    from safetensors.torch import load_file, save_file

    with open(os.path.join(text_dir, "config.json")) as f:
        text = json.load(f)
    weights = {
        f"language_model.{k}": v for k, v in load_file(os.path.join(text_dir, "model.safetensors")).items()
    }
    g = torch.Generator().manual_seed(seed)
    for name, shape in _vision_shapes(text["hidden_size"]).items():
        weights[name] = (torch.randn(*shape, generator=g) * 0.02).to(getattr(torch, dtype))
    os.makedirs(out_dir, exist_ok=True)
    save_file(weights, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    shutil.copyfile(KIMI_CONFIG_CODE, os.path.join(out_dir, "configuration_kimi_k25.py"))
    last = text["vocab_size"] - 1
    ids = ids or {"[BOS]": text.get("bos_token_id", 0), "[EOS]": text.get("eos_token_id", 1),
                  "[PAD]": text.get("pad_token_id") or 0, "<|media_pad|>": last}  # fmt: skip
    for k in ("transformers_version", "_name_or_path", "dtype"):
        text.pop(k, None)
    text.update(
        model_type="kimi_k2", architectures=["DeepseekV3ForCausalLM"], bos_token_id=ids["[BOS]"],
        eos_token_id=ids["[EOS]"], pad_token_id=ids["[PAD]"], torch_dtype=dtype,
        auto_map={"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                  "AutoModel": "modeling_deepseek.DeepseekV3Model",
                  "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
    )  # fmt: skip
    v = KIMI_VISION
    vision = {
        **v, "vt_hidden_size": v["hidden_size"], "vt_num_hidden_layers": v["num_hidden_layers"],
        "vt_num_attention_heads": v["num_attention_heads"], "vt_intermediate_size": v["intermediate_size"],
        "mm_hidden_size": v["hidden_size"], "text_hidden_size": text["hidden_size"],
        "pos_emb_type": "divided_fixed", "video_attn_type": "spatial_temporal", "merge_type": "sd2_tpool",
        "mm_projector_type": "patchmerger", "projector_hidden_act": "gelu", "projector_ln_eps": 1e-5,
    }  # fmt: skip
    _write_json(os.path.join(out_dir, "config.json"), {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"},
        "model_type": "kimi_k25", "dtype": dtype, "tie_word_embeddings": False,
        "bos_token_id": ids["[BOS]"], "eos_token_id": ids["[EOS]"], "pad_token_id": ids["[PAD]"],
        "media_placeholder_token_id": ids["<|media_pad|>"], "ignore_index": -100,
        "use_unified_vision_chunk": True, "video_placeholder": "<|kimi_k25_video_placeholder|>",
        "text_config": text,
        "vision_config": vision,
    })  # fmt: skip


def build(
    name: str, model_dir: str, data_path: str, samples: int, seed: int, dtype: str = "bfloat16"
) -> None:
    """The ``name`` target's model directory and a conversations JSONL for it (``dtype``: the
    Kimi wrapper's weights; the tests compare its MoE in float32, as DeepSeek-V3's)."""
    if name not in NAMES:
        raise ValueError(f"unknown target {name!r}; choose one of {', '.join(NAMES)}")
    os.makedirs(model_dir, exist_ok=True)
    rows = conversations(seed, samples, reasoning=name != "llama3")
    with open(data_path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    texts = [
        t[k] for r in rows for t in r["conversations"] for k in ("content", "reasoning_content") if k in t
    ]
    if name == "kimi-k2.5":
        vocab, ids = _kimi_tokenizer(texts, model_dir)
        _kimi_model(vocab, ids, model_dir, seed, dtype)
        return
    family = FAMILIES[name]
    vocab = _fast_tokenizer(family, texts, model_dir)
    _build_weights(family["config"], vocab, model_dir, seed)
    tok_ids = json.load(open(os.path.join(model_dir, "tokenizer.json")))["added_tokens"]
    by_name = {t["content"]: t["id"] for t in tok_ids}
    gen = {"eos_token_id": by_name[family["eos"]]}
    if family["bos"]:
        gen["bos_token_id"] = by_name[family["bos"]]
    _write_json(os.path.join(model_dir, "generation_config.json"), gen)
