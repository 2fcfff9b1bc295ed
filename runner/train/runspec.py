"""The run directory, from the job's facts: ``run.yaml``, the draft config, the target view (``target``),
``command.json``, and the held-out split (``split``) when ``[train] eval_samples`` is set.

``run.yaml`` is JSON (YAML's subset), so hsx needs no YAML library.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from .. import specforge_cpu
from ..contract.atomic import write_atomic
from ..contract.config import Config
from ..contract.errors import ConfigError
from ..job import rundir
from ..output.store import DESCRIPTION
from . import guard, split, target

RUN_ID = "hsx-eagle3"
# the target's config keys a draft shares (SpecForge's own list for a generated draft config)
SHARED = (
    "vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "max_position_embeddings", "rms_norm_eps", "hidden_act", "initializer_range", "attention_bias",
    "attention_dropout", "head_dim", "rope_theta", "rope_scaling", "bos_token_id", "eos_token_id",
    "pad_token_id",
)  # fmt: skip
DRAFT_VOCAB = 32000  # SpecForge's EAGLE-3 default
MASTER = "set-by-each-launch"  # run.yaml's master_addr on several nodes: the Slurm job's overrides it


@dataclass
class RunPaths:
    root: str

    def __getattr__(self, name: str) -> str:
        files = {
            "yaml": "run.yaml", "command": "command.json", "log": "train.log", "status": "status.json",
            "lock": ".lock", "draft": "draft.json", "target": "target", "output": "output",
            "cache": "cache", "features": split.TRAIN, "eval": split.EVAL, "split": split.NAME,
        }  # fmt: skip
        if name in files:
            return os.path.join(self.root, files[name])
        raise AttributeError(name)


def run_dir(cfg: Config) -> str:
    return rundir.of(cfg, "train")


def export_dir(cfg: Config) -> str:
    return os.path.abspath(cfg.train.export_dir or os.path.join(run_dir(cfg), "export"))


def description(cfg: Config) -> dict:
    try:
        with open(os.path.join(cfg.job.out, DESCRIPTION)) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"no readable {DESCRIPTION} in {cfg.job.out} ({e}): extract first") from None
    if not isinstance(d, dict) or len(d.get("aux_layer_ids") or []) != 3:
        raise ConfigError(f"{cfg.job.out}/{DESCRIPTION} names no three aux_layer_ids")
    return d


def feature_files(out: str) -> int:
    """The files SpecForge's offline reader trains on: every .ckpt / .ckpt.gz below ``out``."""
    return len(split.sample_files(out))


def draft_config(model: str, aux: list[int]) -> dict:
    t = target.text_config(model)
    d = {k: t[k] for k in SHARED if t.get(k) is not None}
    d.update(
        architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
        tie_word_embeddings=False, use_cache=True, torch_dtype="bfloat16",
        draft_vocab_size=min(DRAFT_VOCAB, int(t["vocab_size"])),
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(aux), "use_aux_hidden_state": True},
    )  # fmt: skip
    d.setdefault("pad_token_id", 0)
    return d


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def world(spec: dict) -> int:
    """The trainer's ranks: SpecForge's nnodes x nproc_per_node (an operator's keys included)."""
    t = spec["deployment"]["trainer"]
    return int(t.get("nnodes", 1)) * int(t.get("nproc_per_node", 1))


def total_steps(spec: dict, files: int) -> int:
    t = spec["training"]
    per_epoch = math.ceil(files / (int(t["batch_size"]) * world(spec) * int(t.get("accumulation_steps", 1))))
    epochs = per_epoch * int(t["num_epochs"])
    return min(int(t["max_steps"]), epochs) if t.get("max_steps") else epochs  # a cap: the epochs end it too


def spec_for(cfg: Config, paths: RunPaths, desc: dict, emb: str, head: str) -> dict:
    t = cfg.train
    training = {
        "strategy": "eagle3", "num_epochs": t.epochs, "batch_size": t.batch_size,
        "learning_rate": t.learning_rate, "save_interval": t.save_interval,
        "max_checkpoints": t.max_checkpoints, "log_interval": t.log_interval, "seed": t.seed,
    }  # fmt: skip
    if t.max_steps:
        training["max_steps"] = t.max_steps
    data = {"hidden_states_path": os.path.abspath(cfg.job.out)}
    if t.eval_samples:
        data = {"hidden_states_path": paths.features, "eval_hidden_states_path": paths.eval}
    spec = {
        "run_id": RUN_ID,
        "output_dir": paths.output,
        "model": {
            "target_model_path": paths.target,
            "draft_model_config": paths.draft,
            "embedding_key": emb,
            "lm_head_key": head,
            "torch_dtype": "bfloat16",
            "trust_remote_code": cfg.job.trust_remote_code,
        },  # fmt: skip
        "data": {
            **data,
            "max_length": int(desc.get("max_length") or cfg.job.max_length),
            "cache_dir": paths.cache,
        },
        "training": training,
        "tracking": {"report_to": "none"},
        "deployment": {"mode": "local_colocated", "trainer": {"nnodes": t.nodes, "nproc_per_node": t.gpus}},
    }
    if t.nodes > 1:  # SpecForge refuses several nodes without one; each launch names the real first node
        spec["deployment"]["trainer"]["master_addr"] = MASTER
    if specforge_cpu.shims_of(cfg.train.python):
        spec = merge(spec, specforge_cpu.yaml_keys())
    guard.specforge_keys(t.specforge, spec)
    spec = merge(spec, t.specforge)
    if t.eval_samples:  # at each save: SpecForge's save of a new best then falls on a save step
        spec["training"].setdefault("eval_interval", spec["training"]["save_interval"])
    return spec


def command(cfg: Config, paths: RunPaths, resume_from: str | None) -> dict:
    """``resume_from``: the complete checkpoint's own dir. SpecForge, given the run root, takes
    its ``-latest`` link, else the highest dir with a ``training_state.pt``: after a kill -9
    in a save, one whose rank files are not all there."""
    argv = [cfg.train.python, "-m", "specforge.cli", "train", "-c", paths.yaml]
    if resume_from:
        argv.append(f"training.resume_from={resume_from}")
    return {"argv": argv, "env": {"PYTHONUNBUFFERED": "1", **specforge_cpu.env(cfg.train.python)}}


def draft_for(cfg: Config, desc: dict) -> dict:
    """The draft to train: the operator's own ``[job] draft_config`` (whose layer ids the
    extraction took), else one derived from the target; its layer ids are the extraction's
    wherever it names none."""
    if not cfg.job.draft_config:
        return draft_config(cfg.job.model, desc["aux_layer_ids"])
    try:
        with open(cfg.job.draft_config) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"[job] draft_config {cfg.job.draft_config} is unreadable ({e})") from None
    eagle = dict(d.get("eagle_config") or {})
    eagle.setdefault("eagle_aux_hidden_state_layer_ids", list(desc["aux_layer_ids"]))
    return {**d, "eagle_config": eagle}


def plan(cfg: Config) -> tuple[RunPaths, dict, dict]:
    """What a first start writes, written nowhere (preflight judges it first): (paths, spec, draft)."""
    desc = description(cfg)
    paths = RunPaths(run_dir(cfg))
    emb, head = target.keys(cfg.job.model)
    spec = spec_for(cfg, paths, desc, emb, head)
    return paths, spec, draft_for(cfg, desc)


def owned(cfg: Config) -> RunPaths:
    """The run's paths once the run dir and export dir are ones hsx may write into (ConfigError)."""
    paths = RunPaths(rundir.check(cfg, "train"))
    guard.export_dir(cfg, export_dir(cfg), paths.root)
    return paths


def prepare(cfg: Config) -> tuple[RunPaths, dict]:
    """Write the run dir's files for a first start (the view is kept if there); (paths, spec)."""
    paths, spec, draft = plan(cfg)
    owned(cfg)
    rundir.claim(cfg, "train")
    if cfg.train.eval_samples:
        split.write(cfg.job.out, paths.root, cfg.train.eval_samples, cfg.train.seed)
    target.view(cfg.job.model, paths.target)
    write_atomic(paths.draft, json.dumps(draft, indent=1), 0o644)
    write_atomic(paths.yaml, json.dumps(spec, indent=1) + "\n", 0o644)
    return paths, spec
