"""Status round trip: the persistent two-hop path vs a fresh ``ssh -J``, in one run.

Starts the real jump + target daemons of tests/sshd.py on loopback, writes a status record
for the real ``hsx-runner`` to read, and times ``GpuBox.status()`` over one persistent
SSHTransport against ``ssh -J jump target 'hsx-runner status --json --config F'``.

The remainder is broken down by measuring, on the same path, ``/bin/true`` (channel + the
account's shell) and, locally, the runner alone. It runs twice: with the account's shell as it
is (bash under sshd reads ~/.bashrc even for commands), and with rc files skipped (what an
account whose shell reads none costs). Goal: ratio <= 0.1.

    .venv/bin/python bench/ssh_status.py [--runs 20] [--fresh-runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from remote.client import GpuBox  # noqa: E402
from remote.ssh import SSHTransport  # noqa: E402
from runner.contract.status import Phase, StatusRecord, write_record  # noqa: E402
from tests import sshd  # noqa: E402

RUNNER = os.path.join(os.path.dirname(sys.executable), "hsx-runner")


def timed(fn, n: int) -> float:
    """Median wall time of fn() in ms."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


def job_config(root: str) -> str:
    out = os.path.join(root, "out")
    os.makedirs(out, exist_ok=True)
    write_record(
        os.path.join(out, "status.json"),
        StatusRecord(job="bench", phase=Phase.STOPPED, total=37312, done=25581),
    )
    path = os.path.join(root, "hsx.toml")
    with open(path, "w") as f:
        f.write(f'[job]\nmodel = "{root}/model"\ndataset = "{root}/d.jsonl"\nout = "{out}"\n')
    return path


def measure(pair: sshd.TwoHop, cfg_path: str, runs: int, fresh_runs: int) -> dict:
    t = SSHTransport(
        pair.target.addr, pair.target.port, pair.user, pair.client_key, pair.known_hosts, jump=pair.jump_spec
    )
    box = GpuBox(t, RUNNER, cfg_path, timeout_s=30)
    try:
        for _ in range(3):
            assert box.status().done == 25581
        persistent = timed(box.status, runs)
        true_rt = timed(lambda: t.run(["/bin/true"], 10), runs)
    finally:
        box.close()
    argv = [RUNNER, "status", "--json", "--config", cfg_path]
    ssh = ["ssh", "-F", pair.ssh_config(), "-J", "hsx-jump", "hsx-target", shlex.join(argv)]

    def fresh_call() -> None:
        p = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and '"done": 25581' in p.stdout, p.stderr

    fresh_call()
    fresh = timed(fresh_call, fresh_runs)
    local_runner = timed(lambda: subprocess.run(argv, capture_output=True, check=True), fresh_runs)
    return {
        "persistent_status_ms": persistent,
        "fresh_ssh_J_status_ms": fresh,
        "ratio": round(persistent / fresh, 3),
        "persistent_true_ms": true_rt,  # channel open + exec + the account's shell + `timeout`
        "runner_status_local_ms": local_runner,  # interpreter start + imports + reading the record
        "fresh_setup_ms": round(fresh - persistent, 1),  # what the persistent path saves per call
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--fresh-runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    why = sshd.available()
    if why or not os.path.exists(RUNNER):
        sys.exit(f"cannot run: {why or RUNNER + ' missing (pip install -e .)'}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="hsx-bench-") as root:
        cfg_path = job_config(root)
        with sshd.two_hop(os.path.join(root, "sshd")) as pair:
            results["account_shell"] = measure(pair, cfg_path, args.runs, args.fresh_runs)
            pair.lean_shell = True
            pair.write_configs()
            pair.restart(pair.target)
            results["no_rc_files"] = measure(pair, cfg_path, args.runs, args.fresh_runs)
    a, b = results["account_shell"], results["no_rc_files"]
    results["shell_rc_ms"] = round(a["persistent_true_ms"] - b["persistent_true_ms"], 1)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for name, r in results.items():
        if isinstance(r, dict):
            print(
                f"{name:14s} persistent {r['persistent_status_ms']:7.1f} ms   fresh ssh -J {r['fresh_ssh_J_status_ms']:7.1f} ms"
                f"   ratio {r['ratio']:.3f}   (true over the path {r['persistent_true_ms']:.1f} ms,"
                f" runner alone {r['runner_status_local_ms']:.1f} ms)"
            )
    print(f"the account's rc files cost {results['shell_rc_ms']:.1f} ms per command")
    print(
        "persistent = channel open + exec through both hops + the account's shell + `timeout` + the runner; "
        "fresh adds a process, two key exchanges and two authentications"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
