"""The runner's systemd unit as ``hsx deploy`` installs it: its template, and every path
escaped as systemd reads it (or refused, naming the path a unit cannot hold)."""

from __future__ import annotations

import re
import unicodedata

from runner.contract.errors import ConfigError

UNIT_NAME = "hsx-runner.service"
UNIT_DIR = "/etc/systemd/system"

UNIT_TEMPLATE = """\
# systemd unit for the hsx runner on the GPU box, written by `hsx deploy` for its prefix.
# Enabled at boot only when deploy runs with autostart: a GPU service that starts by itself
# after a reboot can hold the GPUs before anyone has looked at the box.
[Unit]
Description=hsx runner (hidden-state extraction)
After=network-online.target local-fs.target
Wants=network-online.target
RequiresMountsFor={out}
# Restart after a crash, but give up after 3 crashes in 10 minutes.
StartLimitIntervalSec=600
StartLimitBurst=3

[Service]
Type=simple
WorkingDirectory={prefix}
ExecStart={runner} run --config {config}
Restart=on-failure
RestartSec=30
# 1 job failed with a reason, 2 config error, 3 already running: a restart would not help.
RestartPreventExitStatus=1 2 3
# SIGTERM to the runner alone: it drains in-flight requests and stops its server itself.
KillMode=mixed
KillSignal=SIGTERM
TimeoutStopSec=120
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
"""


UNIT_PLAIN = re.compile(r"[A-Za-z0-9/._+,:@=~-]*")  # needs no quotes in a unit
UNIT_REFUSED = "\"'\\"  # systemd refuses them in an executable's name; in a path, refused alike


def unit_path(what: str, path: str) -> str:
    """A path as a unit file must spell it: ``%`` doubled (systemd's specifiers); control
    characters, quotes and backslashes refused (a newline would start a new directive)."""
    cc = next((c for c in path if unicodedata.category(c) == "Cc"), None)
    if cc is not None:
        raise ConfigError(f"{what} {path!r} holds a control character ({cc!r}): no unit file can hold it")
    if any(c in UNIT_REFUSED for c in path):
        raise ConfigError(
            f"{what} {path!r} holds a quote or a backslash, which systemd cannot take in a unit"
        )
    if path != path.strip(" "):
        raise ConfigError(f"{what} {path!r} begins or ends with a space, which systemd would drop")
    return path.replace("%", "%%")


def _word(text: str) -> str:
    """One word of ExecStart or a path list: double-quoted when it holds anything but plain
    characters (a space would split it)."""
    return text if UNIT_PLAIN.fullmatch(text) else f'"{text}"'


def render_unit(prefix: str, config: str, out: str) -> str:
    """The runner's unit, every path escaped as systemd reads it, or a ConfigError naming the
    path it cannot hold."""
    p = unit_path("the install prefix", prefix)
    c = unit_path("[remote] runner_config", config)
    o = unit_path("[job] out", out)
    return UNIT_TEMPLATE.format(
        prefix=p,  # WorkingDirectory takes its value whole: never quoted
        runner=_word(f"{p}/venv/bin/hsx-runner"),  # the executable: no $ expansion there
        config=_word(c.replace("$", "$$")),  # an argument: $ would be an environment variable
        out=_word(o),  # RequiresMountsFor is a list of paths
    )
