"""The target as SpecForge's target head reads it: a view folder in the run dir, and the
embedding and lm_head keys from its weight map.

The view links the target's files and writes an index when it has none (the target head refuses
a model dir without ``*.index.json``). A multimodal wrapper (a ``text_config`` inside, as
Kimi-K2.5's) gets a text-only ``config.json``: the target head reads ``hidden_size`` and
``vocab_size`` from the top level, which the wrapper may not answer; its weights keep their
``language_model.`` prefix, named by the keys. SpecForge's resume checks the target's identity,
so the view is written once and kept for the run's life.
"""

from __future__ import annotations

import json
import os
import shutil

from ..contract.atomic import write_atomic
from ..contract.errors import ConfigError

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
# text model types a wrapper names that transformers knows by another name, with the class the
# view's config names (Kimi-K2.5's text_config says kimi_k2, remote code absent from the view)
TEXT_TYPES = {"kimi_k2": ("deepseek_v3", "DeepseekV3ForCausalLM")}


def _config(model: str) -> dict:
    with open(os.path.join(model, CONFIG)) as f:
        return json.load(f)


def text_config(model: str) -> dict:
    """The text model's config: a wrapper's ``text_config``, else the config itself."""
    c = _config(model)
    return c["text_config"] if isinstance(c.get("text_config"), dict) else c


def text_only(model: str) -> dict | None:
    """The config.json a wrapper's view gets (None: the target is a text model already)."""
    c = _config(model)
    if not isinstance(c.get("text_config"), dict):
        return None
    t = {k: v for k, v in c["text_config"].items() if k != "auto_map"}
    if t.get("model_type") in TEXT_TYPES:
        t["model_type"], arch = TEXT_TYPES[t["model_type"]]
        t["architectures"] = [arch]
    return t


def weight_map(model: str) -> dict[str, str]:
    """The target's tensor → file map: its own index, else read from its safetensors headers."""
    try:
        return _read_weight_map(model)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(
            f"the target's weights in {model} are unreadable ({type(e).__name__}: {e})"
        ) from None


def _read_weight_map(model: str) -> dict[str, str]:
    for name in sorted(os.listdir(model)):
        if name.endswith(".index.json"):
            with open(os.path.join(model, name)) as f:
                return dict(json.load(f)["weight_map"])
    out: dict[str, str] = {}
    for name in sorted(os.listdir(model)):
        if name.endswith(".safetensors"):
            with open(os.path.join(model, name), "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(min(n, 100 << 20)))  # a torn file: no 2**64-byte read
            out.update({k: name for k in header if k != "__metadata__"})
    if not out:
        raise ConfigError(f"{model}: no *.index.json and no *.safetensors: SpecForge needs the weights")
    return out


def _key(weights: dict[str, str], suffix: str) -> str | None:
    """The target's tensor named ``suffix`` (None: [train.specforge] must name it; preflight says so)."""
    hits = sorted(k for k in weights if k == suffix or k.endswith("." + suffix))
    return min(hits, key=len) if hits else None


def keys(model: str) -> tuple[str | None, str | None]:
    """(embedding key, lm_head key) in the target's weights (a wrapper's keep their prefix)."""
    weights = weight_map(model)
    return _key(weights, "embed_tokens.weight"), _key(weights, "lm_head.weight")


def view(model: str, dest: str) -> None:
    """Link the target's files into ``dest`` with an index and, for a wrapper, a text-only config."""
    if os.path.isdir(dest):
        return
    weights = weight_map(model)
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    text = text_only(model)
    for name in os.listdir(model):
        if not (text and name == CONFIG):
            os.symlink(os.path.join(os.path.abspath(model), name), os.path.join(tmp, name))
    if text:
        write_atomic(os.path.join(tmp, CONFIG), json.dumps(text, indent=1), 0o644)
    if not any(n.endswith(".index.json") for n in os.listdir(model)):
        write_atomic(os.path.join(tmp, INDEX), json.dumps({"metadata": {}, "weight_map": weights}), 0o644)
    os.rename(tmp, dest)
