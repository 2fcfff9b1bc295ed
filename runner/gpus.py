"""Who holds the GPUs (NVML), and which systemd unit owns them: the seeds' auto-started
vLLM held all 8 GPUs after a reboot. Stopping such a unit happens only when asked."""

from __future__ import annotations

import re
import subprocess

_UNIT_RE = re.compile(r"/([^/]+\.service)(?:/|$)")


def unit_of(cgroup_text: str) -> str | None:
    """The systemd service in a /proc/PID/cgroup text, if any (user sessions excluded)."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        units = [u for u in _UNIT_RE.findall(path) if not u.startswith(("user@", "session-"))]
        if units:
            return units[-1]
    return None


def _proc(pid: int, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}") as f:
            return f.read()
    except OSError:
        return ""


def holders() -> tuple[list[dict], str | None]:
    """Processes on any GPU: [{gpu, pid, name, used_mib, unit}], or an error when NVML is absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # no driver, no library: say so, do not guess
        return [], f"NVML unavailable ({type(e).__name__}: {e})"
    out = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(h))
            procs += list(pynvml.nvmlDeviceGetGraphicsRunningProcesses(h))
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                out.append({
                    "gpu": i, "pid": p.pid, "name": _proc(p.pid, "comm").strip() or "?",
                    "used_mib": int(used / 2**20) if used else None, "unit": unit_of(_proc(p.pid, "cgroup")),
                })  # fmt: skip
    finally:
        pynvml.nvmlShutdown()
    return out, None


def stop_units(units: list[str]) -> list[dict]:
    """systemctl stop + disable, one unit at a time; each result reported."""
    results = []
    for u in units:
        if not re.fullmatch(r"[A-Za-z0-9@._:-]+\.service", u):
            results.append({"unit": u, "ok": False, "detail": "not a unit name"})
            continue
        stop = subprocess.run(["systemctl", "stop", u], capture_output=True, text=True)
        disable = subprocess.run(["systemctl", "disable", u], capture_output=True, text=True)
        ok = stop.returncode == 0 and disable.returncode == 0
        detail = "stopped and disabled" if ok else (stop.stderr or disable.stderr).strip()[-300:]
        results.append({"unit": u, "ok": ok, "detail": detail})
    return results
