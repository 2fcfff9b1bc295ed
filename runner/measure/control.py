"""``hsx-runner measure start|resume|stop|status``: cheap refusals first, then the detached
supervisor (runner/measure/supervisor.py), which claims the run by holding its lock."""

from __future__ import annotations

import dataclasses
import os
import sys

from ..contract import timing
from ..contract.config import Config
from ..contract.measure import RESULTS
from ..contract.replies import OK, REFUSED, Reply
from ..contract.train import in_sglang_units
from ..job import detach
from ..output.lock import is_held_at
from ..train import record as train_record
from ..train import runspec
from .record import Record, read


def run_dir(cfg: Config) -> str:
    return os.path.abspath(cfg.measure.run_dir or cfg.job.out.rstrip("/") + "-measure")


def draft(cfg: Config) -> str:
    return os.path.abspath(cfg.measure.draft or runspec.export_dir(cfg))


def refused(why: str) -> Reply:
    return Reply({"started": False, "reason": why}, why, REFUSED)


def _cheap(cfg: Config, root: str) -> Reply | None:
    held, pid = is_held_at(os.path.join(root, ".lock"))
    if held:
        return refused(f"a measurement runs in {root} (pid {pid})")
    if cfg.server.backend != "sglang":
        return refused(
            'a measurement serves the draft in SGLang: [server] backend must be "sglang" '
            "(the demo's: hsx demo --backend sglang)"
        )
    if not os.path.isfile(os.path.join(draft(cfg), "config.json")):
        return refused(
            f"no exported draft in {draft(cfg)}: train and export it first (hsx-runner train export)"
        )
    return None


def _launch(cfg: Config, root: str, how: str) -> Reply:
    rec = Record.load(root)
    rec.update(phase="preflight", export_dir=draft(cfg), run_dir=root, reason="", pid=None)
    rec.write()
    argv = [sys.executable, "-m", "runner.measure.supervisor", root, os.path.abspath(cfg.path)]
    p = detach.spawn(argv, os.path.join(root, "supervisor.log"))
    held = lambda: is_held_at(os.path.join(root, ".lock")) == (True, p.pid)  # noqa: E731
    claimed = detach.wait_claim(p, held, timing.current().claim_s)
    if claimed is False:
        why = f"the measuring supervisor exited with code {p.returncode} at once; see {root}/supervisor.log"
        rec.update(phase="crashed", reason=why)
        rec.write()
        return refused(why)
    return Reply(
        {"started": True, "pid": p.pid, "run_dir": root}, f"measurement {how} (pid {p.pid}); {root}", OK
    )


def start(cfg: Config) -> Reply:
    root = run_dir(cfg)
    if reply := _cheap(cfg, root):
        return reply
    if os.path.exists(os.path.join(root, RESULTS)):
        return refused(f"{root} holds a measurement: resume it (hsx-runner measure resume), or move it aside")
    os.makedirs(root, exist_ok=True)
    return _launch(cfg, root, "started")


def resume(cfg: Config) -> Reply:
    root = run_dir(cfg)
    if reply := _cheap(cfg, root):
        return reply
    rec = read(root)
    if not rec.started_at:
        return refused(f"nothing to resume in {root}: start it first (hsx-runner measure start)")
    if rec.phase == "done":
        return refused(f"the measurement in {root} is done; move it aside to measure again")
    return _launch(cfg, root, "resumed")


def stop(cfg: Config, wait_s: float = 30.0) -> Reply:
    root = run_dir(cfg)
    lock = os.path.join(root, ".lock")
    held, pid = is_held_at(lock)
    if not held or not pid:
        return Reply({"stopped": False, "reason": "not running"}, "not running", REFUSED)
    ok = detach.stop(pid, lambda: is_held_at(lock)[0], wait_s)
    return Reply(
        {"stopped": ok, "pid": pid}, "stopped" if ok else f"stop asked; pid {pid} still ends its request", OK
    )


def status(cfg: Config) -> Reply:
    root = run_dir(cfg)
    rec = read(root)
    trained = train_record.read(runspec.run_dir(cfg)).get("acc_len")  # the last eval: the exported draft's
    rec = dataclasses.replace(rec, run_dir=rec.run_dir or root, export_dir=rec.export_dir or draft(cfg),
                              results=rec.results or os.path.join(root, RESULTS), simulated=in_sglang_units(trained))  # fmt: skip
    d = rec.to_dict()
    return Reply(d, text(rec), OK)


def text(rec) -> str:
    bits = [rec.phase, f"{rec.done}/{rec.total} requests" if rec.total else ""]
    if rec.setting and rec.phase in ("starting_server", "measuring"):
        bits.append(f"setting {rec.setting}" + (f" ({rec.server_activity})" if rec.server_activity else ""))
    if rec.accept_length is not None:
        bits.append(f"measured accept length {rec.accept_length:.2f} at {rec.best}")
    if rec.simulated is not None:
        bits.append(f"simulated {rec.simulated:.2f}")
    bits.append(rec.reason or "")
    return " · ".join(b for b in bits if b)
