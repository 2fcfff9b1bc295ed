"""Who holds the GPUs (NVML), and which systemd unit owns them: the seeds' auto-started
vLLM held all 8 GPUs after a reboot. Stopping such a unit happens only when asked."""

from __future__ import annotations

import os
import re
import subprocess

from ..contract.replies import UNIT_NAME_RE
from ..procs import parent_and_group

# A system service: the first .service under /system.slice (through its sub-slices). Never a
# name inside a service's own sub-groups (a delegated tree names what it likes), nor anything
# under user.slice: any user may call a unit of their own manager sshd.service.
_UNIT_RE = re.compile(r"/system\.slice/(?:[^/]+\.slice/)*([^/]+\.service)(?:/|$)")
RUNNER_UNIT = "hsx-runner.service"  # hsx's own (deploy/unit.py UNIT_NAME): never stopped


def unit_of(cgroup_text: str) -> str | None:
    """The system service in a /proc/PID/cgroup text, if any: from systemd's own tree (the
    unified hierarchy's line, or v1's name=systemd), never a controller's."""
    for line in cgroup_text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (hierarchy, controllers) == ("0", "") or controllers == "name=systemd":
            m = _UNIT_RE.match(path)
            return m.group(1) if m else None
    return None


def is_ours(pid: int, roots: set[int]) -> bool:
    """This process's own process group, or a descendant of one of ``roots`` (the runner
    asking, and the job's runner with the server it started)."""
    mine = os.getpgrp()
    for _ in range(64):  # a parent chain, never a loop
        if pid in roots:
            return True
        st = parent_and_group(pid)
        if st is None:
            return False
        if st[1] == mine:
            return True
        if st[0] <= 1:
            return False
        pid = st[0]
    return False


def protected_units(devices: list[dict], roots: set[int]) -> set[str]:
    """Units free-gpus never stops: hsx's own, the one this runner runs in, and any that holds
    a process of ours."""
    own = {RUNNER_UNIT, unit_of(_proc(os.getpid(), "cgroup"))}
    own |= {p["unit"] for d in devices for p in d["procs"] if p["unit"] and is_ours(p["pid"], roots)}
    return {u for u in own if u}


def _proc(pid: int, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}") as f:
            return f.read()
    except OSError:
        return ""


STUB_ENV = "HSX_NVML_STUB"  # a JSON file standing in for NVML (tests; there is no GPU there)


class _Stub:
    """pynvml's few calls over a JSON description: {"gpus": [{"used_mib", "total_mib",
    "procs": [{"pid", "used_mib", "comm", "cgroup"}]}]}; comm and cgroup, when given, stand
    for /proc/PID of a process on the box described (a unit such as vllm.service)."""

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
            SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("used_mib", 0) * 2**20,
                            comm=p.get("comm"), cgroup=p.get("cgroup"))
            for p in h.get("procs", [])
        ]  # fmt: skip

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
                    "pid": p.pid, "name": (getattr(p, "comm", None) or _proc(p.pid, "comm")).strip() or "?",
                    "used_mib": int(p.usedGpuMemory / 2**20) if getattr(p, "usedGpuMemory", None) else None,
                    "unit": unit_of(getattr(p, "cgroup", None) or _proc(p.pid, "cgroup")),
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


def holders(devices: list[dict], own_pid: int | None, held_mib: int) -> list[dict]:
    """Who holds GPUs, one entry per systemd unit (else per process), then one for the GPUs
    whose memory no visible process explains: {unit, pid, name, gpus, mib[, total_mib]}."""
    by: dict = {}
    for d in devices:
        for p in d["procs"]:
            if p["pid"] != own_pid:
                h = by.setdefault(p["unit"] or p["pid"], {"unit": p["unit"], "pid": None if p["unit"] else p["pid"],
                                                          "name": p["name"], "on": {}})  # fmt: skip
                h["on"].setdefault(d["gpu"], []).append(p["used_mib"])
    used = {d["gpu"]: d["used_mib"] for d in devices}
    out = []
    for h in sorted(by.values(), key=lambda h: (h["unit"] is None, h["unit"] or "", h["pid"] or 0)):
        on = h.pop("on")
        # NVML may not say a process's memory: its GPU's whole use stands in
        mib = sum(
            sum(m or 0 for m in ms) if any(m is not None for m in ms) else used[g] for g, ms in on.items()
        )
        out.append({**h, "gpus": sorted(on), "mib": mib})
    shown = {g for h in out for g in h["gpus"]}
    hidden = [d for d in devices if d["gpu"] not in shown and d["used_mib"] >= held_mib]
    if hidden:
        out.append({"unit": None, "pid": None, "name": "processes NVML does not show",
                    "gpus": [d["gpu"] for d in hidden], "mib": sum(d["used_mib"] for d in hidden),
                    "total_mib": sum(d["total_mib"] for d in hidden)})  # fmt: skip
    return out


def _why(p: subprocess.CompletedProcess) -> str:
    lines = [x for x in (p.stderr or p.stdout).splitlines() if x.strip()]
    return lines[-1].strip()[-300:] if lines else f"systemctl exited {p.returncode}"


def stop_units(units: list[str]) -> list[dict]:
    """systemctl stop + disable, one unit at a time; each result reported: {unit, ok, detail}."""
    results = []
    for u in units:
        if not UNIT_NAME_RE.fullmatch(u):
            results.append({"unit": u, "ok": False, "detail": "not a unit name"})
            continue
        stop = subprocess.run(["systemctl", "stop", "--", u], capture_output=True, text=True)
        disable = subprocess.run(["systemctl", "disable", "--", u], capture_output=True, text=True)
        if stop.returncode:
            detail = f"not stopped: {_why(stop)}"
        elif disable.returncode:
            detail = f"stopped, not disabled (it starts again at boot): {_why(disable)}"
        else:
            detail = "stopped and disabled"
        results.append({"unit": u, "ok": not stop.returncode and not disable.returncode, "detail": detail})
    return results
