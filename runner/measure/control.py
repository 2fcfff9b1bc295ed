"""``hsx-runner measure start|resume|stop|status``: cheap refusals first, then the detached
supervisor (runner/measure/supervisor.py), which claims the run by holding its lock."""

from __future__ import annotations

import dataclasses
import os

from ..contract.config import Config
from ..contract.measure import RESULTS
from ..contract.replies import OK, Reply
from ..contract.train import in_sglang_units
from ..job import rundir, supervised
from ..job.supervised import refused
from ..train import guard, runspec
from ..train import record as train_record
from . import published
from .record import KIND


def run_dir(cfg: Config) -> str:
    return rundir.of(cfg, "measure")


def draft(cfg: Config) -> str:
    return os.path.abspath(cfg.measure.draft or runspec.export_dir(cfg))


def _cheap(cfg: Config, root: str) -> Reply | None:
    if reply := supervised.running(KIND, root):
        return reply
    if why := rundir.refusal(cfg, "measure"):
        return refused(why)
    if cfg.server.backend != "sglang":
        return refused(
            'a measurement serves the draft in SGLang: [server] backend must be "sglang" '
            "(the demo's: hsx demo --backend sglang)"
        )
    if not os.path.isfile(os.path.join(draft(cfg), "config.json")):
        return refused(
            f"no exported draft in {draft(cfg)}: train and export it first (hsx-runner train export)"
        )
    if cfg.measure.draft and (why := guard.trusted(draft(cfg), "[measure] draft")):
        return refused(why)  # root's SGLang loads it (its code too, where the config names some)
    if why := published.refusal(cfg.measure.reference):
        return refused(why)
    return None


def _launch(cfg: Config, root: str, how: str) -> Reply:
    return supervised.launch(KIND, root, cfg.path, how, export_dir=draft(cfg))


def start(cfg: Config) -> Reply:
    root = run_dir(cfg)
    if reply := _cheap(cfg, root):
        return reply
    if os.path.exists(os.path.join(root, RESULTS)):
        return refused(f"{root} holds a measurement: resume it (hsx-runner measure resume), or move it aside")
    return _launch(cfg, rundir.claim(cfg, "measure"), "started")


def resume(cfg: Config) -> Reply:
    root = run_dir(cfg)
    if reply := _cheap(cfg, root):
        return reply
    if reply := supervised.not_resumable(KIND, root, lambda rec: "; move it aside to measure again"):
        return reply
    return _launch(cfg, root, "resumed")


def stop(cfg: Config, wait_s: float = 30.0) -> Reply:
    return supervised.stop(run_dir(cfg), wait_s, "ends its request")


def status(cfg: Config) -> Reply:
    root = run_dir(cfg)
    rec = KIND.read(root)
    trained = train_record.read(runspec.run_dir(cfg)).get("acc_len")  # the last eval: the exported draft's
    rec = dataclasses.replace(rec, run_dir=rec.run_dir or root, export_dir=rec.export_dir or draft(cfg),
                              results=rec.results or os.path.join(root, RESULTS), simulated=in_sglang_units(trained),
                              reference=cfg.measure.reference or None,
                              published=published.beside(cfg.measure.reference, cfg.measure.settings))  # fmt: skip
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
