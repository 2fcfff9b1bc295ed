"""The demo's own tiny model, built offline from a seed: a synthetic conversation dataset, a BPE
tokenizer trained on it with a chat template, and a tiny randomly initialised Llama or DeepSeek-V3
(configs in runner/assets). Same seed, same bytes."""

from __future__ import annotations

import json
import os
import random
from importlib import resources

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIALS = ["<unk>", "<pad>", "<s>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
VOCAB_SIZE = 600


def _words(rng: random.Random, n: int) -> list[str]:
    syll = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "dan", "gel", "hor", "zu", "qi", "bar"]
    return ["".join(rng.choice(syll) for _ in range(rng.randint(1, 3))) for _ in range(n)]


def make_conversations(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    lex = _words(rng, 300)

    def sentence() -> str:
        return " ".join(rng.choice(lex) for _ in range(rng.randint(4, 40))) + rng.choice([".", "?", "!"])

    rows = []
    for _ in range(n):
        turns = []
        if rng.random() < 0.3:
            turns.append({"role": "system", "content": sentence()})
        for _ in range(rng.randint(1, 3)):
            turns.append({"role": "user", "content": " ".join(sentence() for _ in range(rng.randint(1, 3)))})
            turns.append(
                {"role": "assistant", "content": " ".join(sentence() for _ in range(rng.randint(1, 6)))}
            )
        rows.append({"conversations": turns})
    return rows


def build_tokenizer(texts: list[str], out_dir: str):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIALS, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="<|end|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


# Tiny architectures, each a config.json in runner/assets: the demo's Llama, and a
# DeepSeek-V3 (MLA, MoE with a shared expert, a dense first layer) like the seeds' target.
ARCHS = {"llama": "tiny_llama.json", "deepseek_v3": "tiny_deepseek_v3.json"}
# Keys SGLang reads that transformers' DeepseekV3Config does not write.
SGLANG_DEEPSEEK_KEYS = {"moe_layer_freq": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid"}


def build_model(
    seed: int,
    vocab_size: int,
    out_dir: str,
    arch: str = "llama",
    dtype: str = "bfloat16",
    overrides: dict | None = None,
    random_norms: bool = False,
) -> None:
    """A tiny random model of ``arch`` (config in runner/assets, ``overrides`` on top).
    ``random_norms``: norm weights drawn too (all-ones norms make pre- and post-norm states
    differ in scale only, which a check comparing them could not tell apart)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    cfg = json.loads(resources.files("runner").joinpath(f"assets/{ARCHS[arch]}").read_text())
    cfg.update(overrides or {}, vocab_size=vocab_size, torch_dtype=dtype)
    if "rope_scaling" in cfg:
        cfg["rope_scaling"]["original_max_position_embeddings"] = cfg["max_position_embeddings"]
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # a zero routing bias would leave noaux_tc's correction untested
        for name, p in [*model.named_parameters(), *model.named_buffers()]:
            if name.endswith("e_score_correction_bias"):
                p.uniform_(-0.5, 0.5)
            elif random_norms and name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    model.to(getattr(torch, dtype)).save_pretrained(out_dir, safe_serialization=True)
    if arch == "deepseek_v3":
        path = os.path.join(out_dir, "config.json")
        with open(path) as f:
            saved = json.load(f)
        saved.update(SGLANG_DEEPSEEK_KEYS)
        saved.setdefault("rope_scaling", cfg["rope_scaling"])  # SGLang's CPU rotary path: yarn only
        with open(path, "w") as f:
            json.dump(saved, f, indent=2)
