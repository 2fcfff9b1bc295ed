"""Who holds the GPUs (NVML), and which systemd unit owns them: the seeds' auto-started
vLLM held all 8 GPUs after a reboot. Stopping such a unit happens only when asked."""

from __future__ import annotations

import os
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


STUB_ENV = "HSX_NVML_STUB"  # a JSON file standing in for NVML (tests; there is no GPU there)


class _Stub:
    """pynvml's few calls over a JSON description: {"gpus": [{"used_mib", "total_mib",
    "procs": [{"pid", "used_mib"}]}]}."""

    NVMLError = RuntimeError

    def __init__(self, path: str):
        import json

        with open(path) as f:
            self.gpus = json.load(f)["gpus"]

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetMemoryInfo(self, h):
        from types import SimpleNamespace

        return SimpleNamespace(used=h["used_mib"] * 2**20, total=h.get("total_mib", 81559) * 2**20)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        from types import SimpleNamespace

        return [
            SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("used_mib", 0) * 2**20)
            for p in h.get("procs", [])
        ]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return []


def _nvml():
    stub = os.environ.get(STUB_ENV)
    if stub:
        return _Stub(stub)
    import pynvml

    return pynvml


def survey() -> tuple[list[dict], str | None]:
    """Every GPU: {gpu, used_mib, total_mib, procs: [{pid, name, used_mib, unit}]}, or an error
    when NVML is absent. Memory is reported too: in a container NVML may show no PIDs."""
    try:
        nv = _nvml()
        nv.nvmlInit()
    except Exception as e:  # no driver, no library: say so, do not guess
        return [], f"NVML unavailable ({type(e).__name__}: {e})"
    out = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            procs = list(nv.nvmlDeviceGetComputeRunningProcesses(h))
            procs += list(nv.nvmlDeviceGetGraphicsRunningProcesses(h))
            out.append({
                "gpu": i, "used_mib": int(mem.used / 2**20), "total_mib": int(mem.total / 2**20),
                "procs": [{
                    "pid": p.pid, "name": _proc(p.pid, "comm").strip() or "?",
                    "used_mib": int(p.usedGpuMemory / 2**20) if getattr(p, "usedGpuMemory", None) else None,
                    "unit": unit_of(_proc(p.pid, "cgroup")),
                } for p in procs],
            })  # fmt: skip
    except Exception as e:  # a driver error mid-survey: report it rather than half a picture
        return [], f"NVML failed ({type(e).__name__}: {e})"
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - already failing or never initialised
            pass
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
