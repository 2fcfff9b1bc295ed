"""Build the GPU-box client from the config: local when the box is this machine, else SSH."""

from __future__ import annotations

import os
from collections.abc import Callable

from runner.contract.config import Config
from runner.contract.errors import ConfigError

from .client import GpuBox
from .retry import RetryRecord
from .transport import LocalTransport, Transport


def open_box(cfg: Config, on_retry: Callable[[RetryRecord], None] | None = None) -> GpuBox:
    """The client for ``cfg.remote``. Nothing connects yet: the SSH transport connects on its
    first command and reconnects by itself after a drop."""
    r = cfg.remote
    if r.command_timeout_s <= 0 or r.connect_timeout_s <= 0:
        raise ConfigError("[remote] connect_timeout_s and command_timeout_s must be positive")
    transport: Transport
    if r.transport == "local":
        transport = LocalTransport()
    elif r.transport == "ssh":
        from .ssh import SSHTransport  # paramiko only where SSH is used

        # No login shell on the box: the runner is named by its absolute path in the venv.
        if not os.path.isabs(r.runner):
            raise ConfigError(
                f"[remote] runner must be an absolute path on the GPU box when transport = 'ssh' "
                f"(e.g. /data/hsx/venv/bin/hsx-runner), got {r.runner!r}"
            )
        if r.runner_config and not os.path.isabs(r.runner_config):
            raise ConfigError(f"[remote] runner_config must be an absolute path, got {r.runner_config!r}")
        try:
            transport = SSHTransport(
                host=r.host,
                port=r.port,
                user=r.user,
                identity_file=r.identity_file,
                known_hosts=r.known_hosts,
                jump=r.jump or None,
                connect_timeout_s=r.connect_timeout_s,
                on_retry=on_retry,
            )
        except ValueError as e:
            raise ConfigError(f"[remote] {e}") from None
    else:
        raise ConfigError(f"[remote] transport must be 'local' or 'ssh', got {r.transport!r}")
    return GpuBox(transport, r.runner, r.runner_config, timeout_s=r.command_timeout_s)
