"""``hsx-runner preflight``: what would stop a run, found before it starts, each with the
action that fixes it."""

from __future__ import annotations

import os
import shutil

from . import gpus, layers, lock
from .config import Config
from .disk import fmt, worst_case_bytes
from .errors import ConfigError


def _check(name: str, ok: bool, detail: str, fix: str = "") -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail, "fix": fix}


def _line_count(path: str) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def preflight(cfg: Config, free_gpus: bool = False) -> dict:
    j, s = cfg.job, cfg.server
    checks = []
    readable = os.access(j.dataset, os.R_OK)
    rows = _line_count(j.dataset) if readable else 0
    checks.append(
        _check("dataset", readable, f"{j.dataset}: {rows:,} rows" if readable else f"{j.dataset} unreadable")
    )
    info = None
    try:
        info = layers.model_info(j.model)
        aux, source = layers.job_aux_ids(j, info)
        detail = f"{info['architecture']}, {info['num_layers']} layers, H={info['hidden_size']}, aux {aux} ({source})"
        checks.append(_check("model", True, detail))
    except ValueError as e:
        checks.append(_check("model", False, str(e), "fix [job] model / aux_layer_ids / draft_config"))

    try:
        files = layers.check_remote_code(j)
        detail = f"{', '.join(files)} load code of their own (trusted)" if files else "none needed"
        checks.append(_check("remote code", True, detail))
    except ConfigError as e:
        checks.append(
            _check("remote code", False, str(e), "read that code, then set [job] trust_remote_code = true")
        )

    os.makedirs(j.out, exist_ok=True)
    free = shutil.disk_usage(j.out).free
    if info:
        need = rows * worst_case_bytes(j.max_length, info["hidden_size"]) // 2  # half of worst case, a guess
        ok = free > max(need, j.min_free_bytes)
        checks.append(_check("disk", ok, f"{fmt(free)} free at {j.out}; ~{fmt(need)} projected for {rows:,} rows",
                             "free space or point [job] out at a bigger disk"))  # fmt: skip

    held, pid = lock.is_held(j.out)
    checks.append(
        _check("lock", True, f"a runner is running (pid {pid})" if held else "no runner holds the job")
    )

    procs, err = gpus.holders()
    needs_gpu = s.backend == "sglang" or s.device.startswith("cuda")
    if err:
        checks.append(_check("gpus", not needs_gpu, err, "install the NVIDIA driver" if needs_gpu else ""))
    else:
        foreign = [p for p in procs if p["pid"] != pid]
        units = sorted({p["unit"] for p in foreign if p["unit"]})
        detail = "; ".join(f"GPU {p['gpu']}: pid {p['pid']} {p['name']} ({p['used_mib']} MiB){' in ' + p['unit'] if p['unit'] else ''}" for p in foreign)  # fmt: skip
        stopped = gpus.stop_units(units) if (free_gpus and units) else []
        if stopped:
            detail += "; " + "; ".join(f"{r['unit']}: {r['detail']}" for r in stopped)
        ok = not foreign or (
            bool(stopped)
            and all(r["ok"] for r in stopped)
            and len(units) == len({p["unit"] for p in foreign})
        )
        fix = (
            f"hsx-runner preflight --free-gpus stops and disables {', '.join(units)}"
            if units
            else "stop those processes"
        )
        checks.append(_check("gpus", ok, detail or "no other process holds a GPU", "" if ok else fix))

    checks.append(autostart_check(cfg))

    if s.backend == "sglang":
        try:
            from patches.hooks import IncompatibleSGLang, check_installed

            problems = check_installed()
        except IncompatibleSGLang as e:
            problems = [str(e)]
        checks.append(_check("sglang patch", not problems, "; ".join(problems) or "hook points of SGLang 0.5.23 present",
                             "pip install 'hsx-ops[sglang]' (SGLang 0.5.23)"))  # fmt: skip
    return {"ok": all(c["ok"] for c in checks), "checks": checks}


UNIT = "hsx-runner.service"


def autostart_check(cfg: Config) -> dict:
    """Does the runner start at boot as the config says? Off by default: after the seeds'
    reboot, an auto-started GPU service held every GPU before anyone looked."""
    want = cfg.deploy.autostart
    say = "on" if want else "off"
    if not shutil.which("systemctl") or not os.path.isdir("/run/systemd/system"):
        detail = f"autostart {say}; no systemd here: nothing starts the runner at boot (/extract resume after a reboot)"
        return _check(
            "autostart", not want, detail, "" if not want else "autostart needs systemd on the GPU box"
        )
    import subprocess

    p = subprocess.run(["systemctl", "is-enabled", UNIT], capture_output=True, text=True)
    state = p.stdout.strip() or "not installed"
    enabled = state == "enabled"
    detail = f"autostart {say} in the config; {UNIT} is {state}"
    return _check(
        "autostart",
        enabled == want,
        detail,
        "" if enabled == want else "run `hsx deploy` to apply [deploy] autostart",
    )
