"""open_box: the config decides the transport; bad settings are refused with the key named."""

from __future__ import annotations

import os
import sys

import pytest

from remote.client import GpuBox
from remote.connect import open_box
from remote.endpoint import Endpoint, parse_jump
from remote.ssh import SSHTransport
from remote.transport import LocalTransport
from runner.contract.config import from_dict
from runner.contract.errors import ConfigError


def cfg(**remote):
    return from_dict({"remote": remote})


def test_local():
    box = open_box(cfg(transport="local", runner=sys.executable, command_timeout_s=7.0))
    assert isinstance(box, GpuBox) and isinstance(box.transport, LocalTransport)
    assert (box.runner, box.timeout_s) == (sys.executable, 7.0)


def test_ssh_settings_reach_the_transport():
    box = open_box(
        cfg(
            transport="ssh",
            host="10.1.230.174",
            port=2222,
            user="ops",
            jump="root@10.1.2.6:22",
            identity_file="~/.ssh/id_ed25519",
            known_hosts="/etc/hsx/known_hosts",
            runner="/data/hsx/venv/bin/hsx-runner",
            runner_config="/data/hsx/hsx.toml",
            connect_timeout_s=4.0,
        )
    )
    t = box.transport
    assert isinstance(t, SSHTransport)
    assert t.target == Endpoint("ops", "10.1.230.174", 2222)
    assert t.jump == Endpoint("root", "10.1.2.6", 22)
    assert t.identity_file == os.path.expanduser("~/.ssh/id_ed25519")
    assert (t.known_hosts, t.connect_timeout_s) == ("/etc/hsx/known_hosts", 4.0)
    assert not t.connected()  # nothing connects until the first command
    assert box.runner_config == "/data/hsx/hsx.toml"


@pytest.mark.parametrize(
    "remote, message",
    [
        ({"runner": "hsx-runner"}, "absolute path"),
        ({"runner": "/v/bin/hsx-runner", "runner_config": "hsx.toml"}, "runner_config must be an absolute"),
        ({"runner": "/v/bin/hsx-runner", "jump": "root@host:notaport"}, "user@host:port"),
        ({"runner": "/v/bin/hsx-runner", "jump": "root@host:99999"}, "out of range"),
        ({"runner": "/v/bin/hsx-runner", "command_timeout_s": 0.0}, "positive"),
    ],
)
def test_bad_ssh_settings(remote, message):
    with pytest.raises(ConfigError, match=message):
        open_box(cfg(transport="ssh", host="gpu", **remote))


@pytest.mark.parametrize(
    "spec, want",
    [
        ("10.1.2.6", Endpoint("me", "10.1.2.6", 22)),
        ("root@10.1.2.6:2200", Endpoint("root", "10.1.2.6", 2200)),
        ("bastion.example.org:22", Endpoint("me", "bastion.example.org", 22)),
        ("ops@[fd00::1]:2222", Endpoint("ops", "fd00::1", 2222)),
    ],
)
def test_parse_jump(spec, want):
    assert parse_jump(spec, "me") == want


@pytest.mark.parametrize("spec", ["", "a b", "root@", "@host", "host:", "ro@ot@host", "host; rm -rf /"])
def test_parse_jump_refuses(spec):
    with pytest.raises(ValueError):
        parse_jump(spec, "me")
