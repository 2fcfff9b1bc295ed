"""An EAGLE-3 draft for a Llama target, built offline: the layout SpecForge's export writes and
SGLang 0.5.23's ``LlamaForCausalLMEagle3`` loads (``srt/models/llama_eagle3.py``), randomly
initialised from a seed, so that serving it needs no training and no download.

One decoder layer (``midlayer``, its attention reading the token's embedding beside the
target's features: input width 2 x hidden), ``fc`` from the target's captured layers (3 x
hidden) to hidden, a final ``norm``, its own ``lm_head`` over ``draft_vocab_size`` tokens and
the ``d2t``/``t2d`` maps between draft and target ids. The embedding is the target's: SGLang
shares it, so the draft carries none.
"""

from __future__ import annotations

import json
import os

# Keys the draft's config takes over from the target's: the layer's shape and its rope.
SHARED = (
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "hidden_act", "rms_norm_eps", "max_position_embeddings", "vocab_size", "rope_parameters",
    "rope_theta", "rope_scaling", "bos_token_id", "eos_token_id",
)  # fmt: skip


def build(
    target: str,
    out_dir: str,
    seed: int = 0,
    aux_layer_ids: tuple[int, ...] = (1, 3, 5),
    draft_vocab_size: int | None = None,
    dtype: str = "float32",
    echo: bool = False,
) -> str:
    """Write a random draft for the Llama in ``target`` to ``out_dir`` (config.json,
    model.safetensors); return ``out_dir``. Same seed, same bytes. ``aux_layer_ids``: the
    target layers whose outputs the draft reads (SGLang's convention, id i = output of layer
    i). ``draft_vocab_size``: the first that many target ids (default all of them).

    ``echo``: instead of random weights, the target's own last layer, final norm and head,
    fed (through ``fc``) the output of the layer before it, the last of ``aux_layer_ids``,
    which must be the second-to-last layer. Its first draft token is then the target's own
    choice at the previous position, i.e. the token just emitted: a draft that guesses
    "repeat", right wherever a tiny random target loops on one token. A random draft is
    almost never accepted, and a verify pass that accepts nothing never reads past the tree's
    root; this one makes serving tests walk the accept path."""
    import torch
    from safetensors.torch import save_file

    with open(os.path.join(target, "config.json")) as f:
        t = json.load(f)
    vocab = int(t["vocab_size"])
    n_vocab = vocab if draft_vocab_size is None else int(draft_vocab_size)
    hidden, inter = int(t["hidden_size"]), int(t["intermediate_size"])
    heads, kv_heads = int(t["num_attention_heads"]), int(t["num_key_value_heads"])
    head_dim = int(t.get("head_dim") or hidden // heads)
    config = {k: t[k] for k in SHARED if t.get(k) is not None}
    config.update(
        architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
        tie_word_embeddings=False, torch_dtype=dtype, draft_vocab_size=n_vocab,
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(aux_layer_ids), "use_aux_hidden_state": True},
    )  # fmt: skip

    gen = torch.Generator().manual_seed(seed)
    std = float(t.get("initializer_range", 0.02))

    def normal(*shape):
        return torch.randn(*shape, generator=gen) * std

    ones = torch.ones(hidden)
    weights = {
        "fc.weight": normal(hidden, hidden * len(aux_layer_ids)),
        "midlayer.hidden_norm.weight": ones.clone(),
        "midlayer.input_layernorm.weight": ones.clone(),
        "midlayer.post_attention_layernorm.weight": ones.clone(),
        "midlayer.self_attn.q_proj.weight": normal(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": normal(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": normal(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": normal(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": normal(inter, hidden),
        "midlayer.mlp.up_proj.weight": normal(inter, hidden),
        "midlayer.mlp.down_proj.weight": normal(hidden, inter),
        "norm.weight": ones.clone(),
        "lm_head.weight": normal(n_vocab, hidden),
    }
    if echo:
        weights.update(_echo(target, t, hidden, len(aux_layer_ids), aux_layer_ids[-1]))
    weights = {k: v.to(getattr(torch, dtype)).contiguous() for k, v in weights.items()}
    # Draft id i is target id i + d2t[i] (SpecForge's maps): here the first n_vocab target ids.
    weights["d2t"] = torch.zeros(n_vocab, dtype=torch.int64)
    weights["t2d"] = torch.arange(vocab) < n_vocab
    os.makedirs(out_dir, exist_ok=True)
    save_file(weights, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return out_dir


def _echo(target: str, t: dict, hidden: int, n_aux: int, last_aux: int) -> dict:
    """The echo draft's weights, from the target's safetensors (see ``build``)."""
    import torch
    from safetensors.torch import load_file

    last = int(t["num_hidden_layers"]) - 1
    if last_aux != last - 1:
        raise ValueError(f"echo: the last aux layer must be {last - 1} (the input of the last layer)")
    w = {k: v.float() for k, v in load_file(os.path.join(target, "model.safetensors")).items()}
    layer = f"model.layers.{last}."
    fc = torch.zeros(hidden, hidden * n_aux)
    fc[:, -hidden:] = torch.eye(hidden)  # pass the last captured layer's output through
    out = {"fc.weight": fc, "norm.weight": w["model.norm.weight"], "lm_head.weight": w["lm_head.weight"]}
    # The layer's input is [embedding, features]: the embedding half gets zero weights.
    for proj in ("q_proj", "k_proj", "v_proj"):
        m = w[f"{layer}self_attn.{proj}.weight"]
        out[f"midlayer.self_attn.{proj}.weight"] = torch.cat([torch.zeros_like(m), m], dim=1)
    out["midlayer.hidden_norm.weight"] = w[f"{layer}input_layernorm.weight"]
    for name in (
        "self_attn.o_proj",
        "post_attention_layernorm",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    ):
        out[f"midlayer.{name}.weight"] = w[f"{layer}{name}.weight"]
    return out
