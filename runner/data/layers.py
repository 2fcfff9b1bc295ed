"""EAGLE-3 aux-layer convention, shared by both backends and dataset.json.

SpecForge/SGLang convention: aux id ``i`` is the output of decoder layer ``i`` (= the input
of layer ``i+1``, transformers' ``hidden_states[i+1]``), before the final norm. Default ids
``[1, N//2-1, N-4]``. ``hidden_state`` is the final-norm output (the input to lm_head)."""

from __future__ import annotations

import json
import os

CONVENTION = (
    "aux[i] = output of decoder layer i = input of layer i+1 (transformers hidden_states[i+1]), pre-norm"
)
FINAL_NORM = "hidden_state = output of the model's final norm (input to lm_head)"


def default_aux_ids(num_layers: int, architecture: str = "") -> list[int]:
    """The ids SpecForge trains this target with. Its fallback is ``[1, N//2-1, N-4]`` for every
    family (N from ``text_config`` where there is one), but the gpt-oss draft configs it ships
    (configs/gpt-oss-20B-eagle3.json [1, 11, 21], -120B [1, 17, 33]) name ``N-3`` last."""
    if architecture.startswith("GptOss"):
        return [1, num_layers // 2 - 1, num_layers - 3]
    return [1, num_layers // 2 - 1, num_layers - 4]


def draft_aux_ids(path: str) -> list[int] | None:
    """``eagle_config.eagle_aux_hidden_state_layer_ids`` of a SpecForge draft-model config."""
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read draft config {path}: {e}") from None
    ids = (
        (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if isinstance(cfg, dict)
        else None
    )
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        raise ValueError(f"{path}: eagle_aux_hidden_state_layer_ids must be a list of integers, got {ids!r}")
    return ids


def job_aux_ids(job, info: dict) -> tuple[list[int], str]:
    """The aux ids a job extracts and where they come from, as SpecForge resolves them: the
    draft config's, else its default for the target. ``[job] aux_layer_ids`` may only agree."""
    n, arch = info["num_layers"], info["architecture"]
    draft = draft_aux_ids(job.draft_config) if job.draft_config else None
    if draft is not None:
        if job.aux_layer_ids and sorted(job.aux_layer_ids) != sorted(draft):
            raise ValueError(
                f"[job] aux_layer_ids {job.aux_layer_ids} differ from {job.draft_config}'s "
                f"eagle_aux_hidden_state_layer_ids {draft}, which SpecForge would train on; drop one"
            )
        return resolve_aux_ids(draft, n), f"draft config {os.path.abspath(job.draft_config)}"
    if job.aux_layer_ids:
        return resolve_aux_ids(job.aux_layer_ids, n), "[job] aux_layer_ids"
    return resolve_aux_ids(default_aux_ids(n, arch), n), f"SpecForge's default for {arch} ({n} layers)"


def resolve_aux_ids(ids: list[int], num_layers: int) -> list[int]:
    ids = list(ids) or default_aux_ids(num_layers)
    if len(ids) != 3 or len(set(ids)) != 3:
        raise ValueError(f"need three distinct aux layer ids, got {ids} for {num_layers} layers")
    if not all(0 <= i <= num_layers - 2 for i in ids):
        raise ValueError(f"aux layer ids {ids} must lie in 0..{num_layers - 2} ({num_layers} layers)")
    return sorted(ids)


def model_info(model_dir: str) -> dict:
    """hidden size, layer count and dtype from the model's config.json (no weights loaded)."""
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read model config {path}: {e}") from None
    cfg = cfg.get("text_config", cfg)
    try:
        return {
            "hidden_size": int(cfg["hidden_size"]),
            "num_layers": int(cfg["num_hidden_layers"]),
            "dtype": str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
            "architecture": (cfg.get("architectures") or ["?"])[0],
            "vocab_size": int(cfg["vocab_size"]) if cfg.get("vocab_size") else None,
        }
    except KeyError as e:
        raise ValueError(f"model config {path} lacks {e}") from None


def remote_code(*dirs: str) -> list[str]:
    """The files in these model/tokenizer folders that load code of their own (``auto_map``):
    transformers runs it only with trust_remote_code."""
    found = []
    for d in dict.fromkeys(x for x in dirs if x):
        for name in ("config.json", "tokenizer_config.json"):
            path = os.path.join(d, name)
            try:
                with open(path) as f:
                    if "auto_map" in json.load(f):
                        found.append(path)
            except (OSError, json.JSONDecodeError, TypeError):
                continue
    return found


def check_remote_code(job) -> list[str]:
    """Refuse, naming the key, a model or tokenizer that needs code it would run unasked;
    return the files that bring code (trusted, or none)."""
    from ..contract.errors import ConfigError

    files = remote_code(job.model, job.tokenizer)
    if files and not job.trust_remote_code:
        raise ConfigError(
            f"{', '.join(files)} load code of their own (auto_map); read it, then set "
            "[job] trust_remote_code = true to run it"
        )
    return files
