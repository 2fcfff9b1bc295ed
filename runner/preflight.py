"""``hsx-runner preflight``: what would stop a run, found before it starts."""

from __future__ import annotations

import os
import shutil

from . import layers, lock
from .config import Config


def _check(name: str, ok: bool, detail: str) -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail}


def preflight(cfg: Config, free_gpus: bool = False) -> dict:
    j = cfg.job
    checks = []
    checks.append(_check("dataset", os.access(j.dataset, os.R_OK), j.dataset))
    try:
        info = layers.model_info(j.model)
        checks.append(
            _check(
                "model", True, f"{info['architecture']}, {info['num_layers']} layers, H={info['hidden_size']}"
            )
        )
        layers.resolve_aux_ids(j.aux_layer_ids, info["num_layers"])
    except ValueError as e:
        checks.append(_check("model", False, str(e)))
    os.makedirs(j.out, exist_ok=True)
    u = shutil.disk_usage(j.out)
    checks.append(_check("disk", u.free > j.min_free_bytes, f"{u.free / 1e9:.1f} GB free at {j.out}"))
    held, pid = lock.is_held(j.out)
    checks.append(_check("lock", True, f"running (pid {pid})" if held else "no runner holds the job"))
    return {"ok": all(c["ok"] for c in checks), "checks": checks}
