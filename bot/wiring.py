"""Build the ops-side objects from config: the GPU box, the audit log, the handlers."""

from __future__ import annotations

import os

from bot.verbs.audit import AuditLog
from bot.verbs.handlers import Handlers
from bot.watch import history
from remote.live import LiveStatus, kind_live
from runner.contract.config import Config
from runner.contract.kinds import KINDS


def open_box(cfg: Config):
    """A GpuBox for cfg; remote.connect owns this once it exists."""
    try:
        from remote.connect import open_box as connect_open_box
    except ImportError:
        connect_open_box = None
    if connect_open_box is not None:
        return connect_open_box(cfg)
    from remote.client import GpuBox
    from remote.transport import LocalTransport

    if cfg.remote.transport != "local":
        raise RuntimeError("remote.connect is not available: only [remote] transport = 'local' works")
    return GpuBox(LocalTransport(), cfg.remote.runner, cfg.remote.runner_config, cfg.remote.command_timeout_s)


def audit_path(cfg: Config) -> str:
    if cfg.slack.audit_log:
        return cfg.slack.audit_log
    return os.path.join(os.path.dirname(os.path.abspath(cfg.path or ".")), "hsx-audit.jsonl")


def make_handlers(cfg: Config, box=None, in_group=None) -> Handlers:
    box = box if box is not None else open_box(cfg)
    return Handlers(
        box, cfg, AuditLog(audit_path(cfg)), history=lambda: history.events(cfg, box), in_group=in_group,
        live=LiveStatus(box, history.state_path(cfg, ".last.json")),
        lives={k: kind_live(box, k, history.state_path(cfg, f".{k}-last.json")) for k in KINDS},
    )  # fmt: skip
