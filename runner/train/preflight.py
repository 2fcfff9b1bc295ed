"""The training's preflight: what would make SpecForge train on the wrong thing or fail hours
in, found before a start or a resume launches it, each check with the fix (the extraction's
preflight's shape: name, ok, detail, fix).

- features: verify's kept verdict (runner.output.verified) holds for the output as it is now;
- layers: the draft config run.yaml points at names the extraction's aux layer ids, in order;
- target: the target's index holds run.yaml's embedding and lm_head keys;
- disk: room for max_checkpoints + 1 checkpoints (a save writes the new one before it rotates);
- gpus: the extraction's server is gone and no one else holds the GPUs.
"""

from __future__ import annotations

import glob
import math
import os
import shutil

from .. import specforge_cpu
from ..contract.atomic import read_object
from ..contract.checks import check as _check
from ..contract.errors import ConfigError
from ..job.disk import fmt
from ..job.preflight import gpus_check
from ..output import verified
from ..serve import pidfile
from . import progress, runspec
from .target import weight_map

# Bytes a checkpoint keeps per trainable parameter: the bf16 weight, SpecForge's fp32 master
# copy and AdamW's two fp32 moments (specforge/optimizer.py BF16Optimizer). The embedding is
# frozen, so neither saved nor optimised.
BYTES_PER_PARAM = 2 + 4 + 4 + 4


def features(out: str) -> dict:
    ok, detail, fix = verified.check(out)
    return _check("features", ok, detail, fix)


def layers(draft: dict | None, where: str, want: list[int]) -> dict:
    fix = (
        f"set eagle_config.eagle_aux_hidden_state_layer_ids = {want} in {where}, or drop the "
        "[train.specforge] model.draft_model_config that points there"
    )
    if draft is None:
        return _check("layers", False, f"the draft config {where} is unreadable", fix)
    got = (draft.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if got != want:  # the draft's fc takes the three layers concatenated in this order
        detail = (
            f"the draft config {where} names aux layers {got}, the extraction's are {want} (in this order)"
        )
        return _check("layers", False, detail, fix)
    return _check("layers", True, f"draft and extraction both use aux layers {want}")


def target(spec: dict, weights: dict[str, str] | None, why: str = "") -> dict:
    m = spec.get("model") or {}
    where = m.get("target_model_path")
    if weights is None:
        return _check("target", False, f"{where}: {why}", "point [job] model at the target's weights")
    missing = [
        f"{what} key {m[key]!r}" if m.get(key) else f"{what} tensor (*{suffix})"
        for what, key, suffix in (("embedding", "embedding_key", "embed_tokens.weight"),
                                  ("lm_head", "lm_head_key", "lm_head.weight"))
        if m.get(key) not in weights
    ]  # fmt: skip
    if missing:
        fix = (
            "set [train.specforge.model] embedding_key / lm_head_key to the tensors that hold them "
            "(a target with tied embeddings has no lm_head.weight: its embedding is the head)"
        )
        return _check("target", False, f"the target's index ({where}) has no {' and no '.join(missing)}", fix)
    return _check("target", True, f"{m['embedding_key']} and {m['lm_head_key']} in the target's index")


def draft_params(draft: dict) -> int:
    """Trainable parameters of SpecForge's Llama EAGLE-3 draft (LlamaForCausalLMEagle3): one
    decoder layer whose attention reads 2H, the fc over the three aux layers, the head over
    the draft vocab; the frozen embedding is not counted."""
    h = int(draft["hidden_size"])
    heads = int(draft.get("num_attention_heads") or 1)
    kv = int(draft.get("num_key_value_heads") or heads)
    hd = int(draft.get("head_dim") or h // heads)
    inter = int(draft.get("intermediate_size") or 4 * h)
    target_h = int(draft.get("target_hidden_size") or h)
    vocab = int(draft.get("draft_vocab_size") or draft.get("vocab_size") or 0)
    attention = 2 * h * heads * hd + 2 * (2 * h * kv * hd) + heads * hd * h
    return attention + 3 * h * inter + 3 * target_h * h + h * vocab + 4 * h


def checkpoint_bytes(draft: dict) -> int:
    """One checkpoint: the trainable state, plus the vocab maps (a bool per target token, an
    int64 per draft token)."""
    vocab, dvocab = int(draft.get("vocab_size") or 0), int(draft.get("draft_vocab_size") or 0)
    return draft_params(draft) * BYTES_PER_PARAM + vocab + 8 * dvocab


def _existing_dir(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def disk(spec: dict, draft: dict | None, total_steps: int) -> dict:
    output, t = spec["output_dir"], spec.get("training") or {}
    fix = "free space there, point [train] run_dir at a bigger disk, or lower [train] max_checkpoints"
    try:
        each = checkpoint_bytes(draft or {})
    except (KeyError, TypeError, ValueError) as e:
        return _check(
            "disk", False, f"no checkpoint size from the draft config ({type(e).__name__}: {e})", fix
        )
    keep = int(t.get("max_checkpoints") or 0)
    save = int(t.get("save_interval") or 0)
    saves = math.ceil(total_steps / save) if save > 0 else 1
    have = len(progress.checkpoints(output, spec.get("run_id") or runspec.RUN_ID))
    count = max(0, (min(keep + 1, saves) if keep > 0 else saves) - have)  # keep 0: SpecForge keeps all
    where = _existing_dir(output)
    free = shutil.disk_usage(where).free
    detail = (
        f"a checkpoint ≈ {fmt(each)} ({draft_params(draft):,} trainable parameters × {BYTES_PER_PARAM} bytes: "
        f"bf16 weights, fp32 master, AdamW's two moments); {count} more to hold = {fmt(count * each)}, "
        f"{fmt(free)} free at {where}"
    )
    return _check("disk", free >= count * each, detail, fix)


def trainers_gpus(n: int):
    """The GPUs SpecForge's launcher gives ``n`` local ranks: the first n, of CUDA_VISIBLE_DEVICES'
    when it lists indices (NVML's numbering); a list of UUIDs is left to CUDA: all are checked."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    listed = [x.strip() for x in (vis or "").split(",") if x.strip()]

    def pick(devices: list[dict]) -> tuple[list[dict], str]:
        pool, says = devices, f"NVML sees {len(devices)} GPUs"
        if vis is not None and all(x.isdigit() for x in listed):
            by = {d["gpu"]: d for d in devices}
            pool = [by[int(x)] for x in listed if int(x) in by]
            says = f"CUDA_VISIBLE_DEVICES={vis} leaves {len(pool)} GPUs"
        if len(pool) < n:
            return [], f"[train] gpus = {n}, and {says}"
        return pool[:n], ""

    return pick


def gpus(python: str, out: str, n: int = 1, here: bool = True) -> dict:
    """The extraction's server (any rank's pid file that still proves it) holds its GPUs; then
    anyone NVML shows on the ``n`` GPUs the trainer uses, named as the extraction's preflight
    names them. Not ``here`` (the Slurm engine): the job's nodes' GPUs are Slurm's to give."""
    for path in sorted(glob.glob(os.path.join(out, "server*.pid"))):
        pid = pidfile.live(path)
        if pid is not None:
            detail = f"the extraction's server (pid {pid}, {os.path.basename(path)}) still runs"
            return _check(
                "gpus", False, detail, "hsx-runner stop (/extract stop), or wait for the extraction to end"
            )
    if not here:
        return _check(
            "gpus", True, "Slurm gives the job its nodes' GPUs: none on this host are the trainer's"
        )
    cpu = specforge_cpu.shims_of(python)
    check = gpus_check(not cpu, None, False, pick=None if cpu else trainers_gpus(n))
    if cpu:  # the CPU lane trains on no GPU: held ones are no obstacle
        return {**check, "ok": True, "detail": f"the CPU lane trains on no GPU; {check['detail']}", "fix": ""}
    return check


def _weights(model: str) -> tuple[dict[str, str] | None, str]:
    try:
        return weight_map(model), ""
    except ConfigError as e:  # an unreadable index or header: this check's answer
        return None, str(e)


def checks(cfg, spec: dict, draft: dict | None = None) -> list[dict]:
    """Every check for ``spec`` (a start's plan, or run.yaml for a resume); ``draft`` is the
    config a start will write where run.yaml points (read from there otherwise)."""
    m = spec.get("model") or {}
    where = m.get("draft_model_config", "")
    if draft is None or where != runspec.RunPaths(runspec.run_dir(cfg)).draft:
        draft = read_object(where)
    desc = runspec.description(cfg)
    path = m.get("target_model_path", "")
    weights, why = _weights(path if os.path.isdir(path) else cfg.job.model)
    tree = (spec.get("data") or {}).get("hidden_states_path") or ""
    files = runspec.feature_files(tree if os.path.isdir(tree) else cfg.job.out)  # what SpecForge reads
    return [
        features(cfg.job.out),
        layers(draft, where, list(desc["aux_layer_ids"])),
        target(spec, weights, why),
        disk(spec, draft, runspec.total_steps(spec, files)),
        gpus(cfg.train.python, cfg.job.out, cfg.train.gpus, cfg.cluster.engine != "slurm"),
    ]
