"""What each test costs: wall time and the machine's CPU time, setup, call and teardown apart.

``pytest --times=PATH`` writes one row a test phase to PATH (JSON lines) and prints the table by
lane (slow or fast) and by module at the end; ``python -m tests.times PATH`` prints it again from
the file. CPU time is the whole machine's busy time from /proc/stat over the phase (every
process's, the daemons and servers a test starts included, whoever reaps them): beside the wall
time it says whether a module keeps both cores busy or waits. Under xdist the phases overlap, so
a module's CPU counts its neighbours' too; its wall time stays its own."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict

import pytest

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_cpu_s() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (0.0 where /proc is not)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return 0.0
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / _TICK


def pytest_addoption(parser):
    parser.addoption(
        "--times",
        metavar="PATH",
        help="write each test phase's wall and CPU time to PATH and print them by lane and module",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    cpu = getattr(item, "_hsx_cpu", {}).get(call.when)
    if cpu is not None:
        rep.user_properties.append(("cpu_s", cpu))
        rep.user_properties.append(("slow", item.get_closest_marker("slow") is not None))


def _phase(when):
    @pytest.hookimpl(hookwrapper=True)
    def hook(item, *args):
        c0 = busy_cpu_s()
        yield
        if not hasattr(item, "_hsx_cpu"):
            item._hsx_cpu = {}
        item._hsx_cpu[when] = busy_cpu_s() - c0

    return hook


pytest_runtest_setup = _phase("setup")
pytest_runtest_call = _phase("call")
pytest_runtest_teardown = _phase("teardown")


class _Writer:
    def __init__(self, path):
        self.path = path
        self.f = open(path, "w")  # noqa: SIM115 - open for the session
        self.t0 = time.time()

    def pytest_runtest_logreport(self, report):
        props = dict(report.user_properties)
        node = getattr(report, "node", None)  # the xdist worker that ran it (none in one process)
        row = {
            "nodeid": report.nodeid,
            "when": report.when,
            "wall_s": round(report.duration, 3),
            "cpu_s": round(props.get("cpu_s", 0.0), 3),
            "slow": bool(props.get("slow", False)),
            "outcome": report.outcome,
            "worker": node.gateway.id if node is not None else None,
            "end": round(getattr(report, "stop", 0.0) - self.t0, 1),  # seconds into the session
        }
        self.f.write(json.dumps(row) + "\n")
        self.f.flush()

    def pytest_terminal_summary(self, terminalreporter):
        self.f.close()
        tr = terminalreporter
        tr.write_sep("=", f"time by lane and module ({self.path}; session {time.time() - self.t0:.0f} s)")
        for line in table(read(self.path)):
            tr.write_line(line)


def pytest_configure(config):
    path = config.getoption("--times", None)
    if path and not hasattr(config, "workerinput"):  # the controller writes; workers only measure
        config.pluginmanager.register(_Writer(path), "hsx-times")


def read(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def table(rows: list[dict]) -> list[str]:
    """Lines: each lane's total, then each module (slowest first) with setup, call and teardown
    wall times, its CPU time and the tests it ran."""
    mods: dict = defaultdict(lambda: defaultdict(float))
    lanes: dict = defaultdict(lambda: defaultdict(float))
    for r in rows:
        mod = r["nodeid"].split("::")[0]
        lane = "slow" if r["slow"] else "fast"
        for acc in (mods[mod], lanes[lane]):
            acc[r["when"]] += r["wall_s"]
            acc["wall"] += r["wall_s"]
            acc["cpu"] += r["cpu_s"]
            acc["tests"] += r["when"] == "call" or (r["when"] == "setup" and r["outcome"] == "skipped")
        mods[mod]["slow"] = max(mods[mod]["slow"], r["slow"])
    head = f"{'':52} {'tests':>5} {'setup':>7} {'call':>7} {'tear':>6} {'wall':>7} {'cpu':>7}"
    out = [head]

    def line(name, a):
        return (
            f"{name[-52:]:52} {int(a['tests']):5d} {a['setup']:7.1f} {a['call']:7.1f} {a['teardown']:6.1f}"
            f" {a['wall']:7.1f} {a['cpu']:7.1f}"
        )

    for lane in ("fast", "slow"):
        if lane in lanes:
            out.append(line(f"lane: {lane}", lanes[lane]))
    out.append(
        line(
            "all",
            {
                k: lanes["fast"][k] + lanes["slow"][k]
                for k in ("tests", "setup", "call", "teardown", "wall", "cpu")
            },
        )
    )
    for mod, a in sorted(mods.items(), key=lambda kv: -kv[1]["wall"]):
        out.append(line(("S " if a["slow"] else "  ") + mod, a))
    return out


COSTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "costs.json")


def module_costs() -> dict[str, float]:
    """{module: wall seconds} of the last run written to tests/costs.json ({} where none is)."""
    try:
        with open(COSTS) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def costs(rows: list[dict]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in rows:
        out[r["nodeid"].split("::")[0]] += r["wall_s"]
    return {m: round(s, 1) for m, s in sorted(out.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    # python -m tests.times PATH [--write-costs]: the table; with --write-costs, tests/costs.json
    # from that run too (the order the modules are handed to the workers in)
    rows = read(sys.argv[1])
    print("\n".join(table(rows)))
    if "--write-costs" in sys.argv[2:]:
        with open(COSTS, "w") as f:
            json.dump(costs(rows), f, indent=0)
            f.write("\n")
