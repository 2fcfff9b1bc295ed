"""``hsx-runner preflight``: what would stop a run, found before it starts, each with the
action that fixes it."""

from __future__ import annotations

import os
import shutil
import time

from ..contract.checks import check as _check
from ..contract.config import Config
from ..contract.errors import ConfigError
from ..data import layers
from ..output import lock
from ..serve import gpus
from ..text.extraction import gpus_text
from . import patch_check
from .disk import TYPICAL_RATIO, fmt, worst_case_bytes

HELD_MIB = 2048  # a GPU with this much memory in use is held, whether or not NVML shows who


def gpus_check(
    needs_gpu: bool,
    own_pid: int | None,
    free_gpus: bool,
    expect: list[str] | None = None,
    until: float | None = None,
    pick=None,
) -> dict:
    """Held GPUs: other processes on them, or memory in use that no visible process explains
    (inside a container NVML may show no PIDs). ``free_gpus`` stops the system units found but
    hsx's own; bound to a question (``expect``: the units it named, ``until``: when its answer
    expires) it stops nothing once the answer expired or the GPUs changed hands. ``pick(devices)``:
    the ones that will be used, and why there are too few ('' when there are enough)."""
    devices, err = gpus.survey()
    if err:
        return _check("gpus", not needs_gpu, err, "install the NVIDIA driver" if needs_gpu else "")
    if pick:
        devices, short = pick(devices)
        if short:
            return _check(
                "gpus", False, short, "set [train] gpus to the GPUs there are (or CUDA_VISIBLE_DEVICES)"
            )
    found = gpus.holders(devices, own_pid, HELD_MIB)
    own = gpus.protected_units(devices, {os.getpid(), *([own_pid] if own_pid else [])})
    units = sorted({h["unit"] for h in found if h["unit"]} - own)
    refused = ""
    if free_gpus and until is not None and time.time() > until:
        when = time.strftime("%H:%M:%S UTC", time.gmtime(until))
        refused = f"the confirmation expired at {when}"
    elif free_gpus and expect is not None and sorted(set(expect)) != units:
        refused = (
            f"the GPUs changed hands since the question (asked about {', '.join(sorted(set(expect))) or 'none'}; "
            f"now {', '.join(units) or 'none'})"
        )
    results = gpus.stop_units(units) if (free_gpus and units and not refused) else []
    stopped = {r["unit"] for r in results if r["ok"]}
    ok = all(h["unit"] in stopped for h in found)
    if units:
        fix = (
            f"/extract free-gpus (or hsx-runner preflight --free-gpus) stops and disables {', '.join(units)}"
        )
    else:
        fix = "stop those processes (another container or job may hold the GPUs)"
    ours = sorted({h["unit"] for h in found if h["unit"]} & own)
    if ours:
        fix += f"; {', '.join(ours)} is hsx's own or this runner's: never stopped by free-gpus"
    detail = gpus_text(found, results) or f"{len(devices)} GPUs, none held"
    if refused:
        detail += f"; nothing stopped: {refused}; ask again"
    check = _check("gpus", ok, detail, "" if ok else fix)
    # what /extract free-gpus offers to stop, and what it did (or why it stopped nothing)
    return {**check, "units": units, "holders": found, "results": results, "refused": refused}


def _device(s) -> str:
    """Where the server computes: [server] device for the reference backend, SGLang's own
    --device flag (default cuda) for SGLang, read by the patch's one flag parser."""
    if s.backend != "sglang":
        return s.device
    from ..contract.launch import ArgsError, parse_flags

    try:
        given = parse_flags(list(s.extra_args)).get("--device")
    except ArgsError:  # the server start refuses such arguments with the reason
        return "cuda"
    return given[-1][0] if given and given[-1] else "cuda"


def _line_count(path: str) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


# Checks that refuse a start (hsx-runner start/resume) unless --force; the others inform.
GATES = ("dataset", "model", "remote code", "disk", "gpus", "sglang patch")


def projected_need(out: str, rows: int, worst: int, storage: str = "ckpt", bits: int = 7) -> tuple[int, str]:
    """Bytes the rest of the job will write in its storage mode: the mean file size of the
    samples already written in that mode; else those of the other mode scaled by the typical
    ratio; else the worst case from max_length (raw: never a fraction of it). The text says which,
    and what ``ckpt.gz`` or 4 mantissa bits would need instead."""
    from ..output.store import Store

    try:
        entries = list(Store(out).manifest().values())
    except Exception:  # noqa: BLE001 - an unreadable manifest is verify's business
        entries = []
    left = max(0, rows - len(entries))
    same = [e.get("bytes", 0) for e in entries if e.get("storage", "ckpt") == storage]
    other = [e for e in entries if e.get("storage", "ckpt") != storage]
    ratio = TYPICAL_RATIO.get((storage, bits))
    if same:
        mean = sum(same) / len(same)
        how = f"{left:,} rows x {fmt(int(mean))} measured ({storage})"
        raw = mean / ratio if ratio else None
    elif other and ratio:
        was = other[0].get("storage", "ckpt")
        raw = sum(e.get("bytes", 0) for e in other) / len(other) / TYPICAL_RATIO[(was, bits)]
        mean = raw * ratio
        how = f"{left:,} rows x {fmt(int(mean))} estimated from {len(other):,} {was} samples"
    else:
        mean, raw = worst, worst
        how = f"{left:,} rows x {fmt(worst)} worst case"
    return int(left * mean), how + _instead(raw, left, storage, bits)


def _instead(raw: float | None, left: int, storage: str, bits: int) -> str:
    """What the smaller modes would need for the same rows (typical ratios), so an operator
    chooses before starting; nothing when the job already uses them."""
    if raw is None or left == 0:
        return ""
    options = [("ckpt.gz", 7, 'storage = "ckpt.gz"'), ("ckpt.gz", 4, "and mantissa_bits = 4")]
    said = [
        f"{label}: ~{fmt(int(left * raw * TYPICAL_RATIO[(s, b)]))}"
        for s, b, label in options
        if TYPICAL_RATIO[(s, b)] < TYPICAL_RATIO.get((storage, bits), 1.0)
    ]
    return f"; {', '.join(said)} (typical ratios)" if said else ""


def gate(report: dict, force: bool) -> list[dict]:
    """The failed checks that refuse a start (none with --force)."""
    return [] if force else [c for c in report["checks"] if c["name"] in GATES and not c["ok"]]


def preflight(
    cfg: Config, free_gpus: bool = False, expect: list[str] | None = None, until: float | None = None
) -> dict:
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
        worst = worst_case_bytes(j.max_length, info["hidden_size"])
        need, how = projected_need(j.out, rows, worst, j.storage, j.mantissa_bits)
        ok = free > need + j.min_free_bytes
        checks.append(_check("disk", ok, f"{fmt(free)} free at {j.out}; {fmt(need)} still needed ({how})",
                             "free space or point [job] out at a bigger disk"))  # fmt: skip

    held, pid = lock.is_held(j.out)
    checks.append(
        _check("lock", True, f"a runner is running (pid {pid})" if held else "no runner holds the job")
    )

    checks.append(gpus_check(_device(s) != "cpu", pid, free_gpus, expect, until))

    checks.append(autostart_check(cfg))

    if s.backend == "sglang":
        problems = patch_check.problems(cfg)
        checks.append(_check("sglang patch", not problems, "; ".join(problems) or "hook points of SGLang 0.5.23 present",
                             "pip install 'hsx-ops[sglang]' (SGLang 0.5.23)"))  # fmt: skip
    return {"ok": all(c["ok"] for c in checks), "checks": checks}


UNIT = gpus.RUNNER_UNIT


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
