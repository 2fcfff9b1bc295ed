"""Which systemd unit holds a GPU (runner/serve/gpus.py): /proc/PID/cgroup texts as real
boxes write them. Only a system service is ever named, so free-gpus stops nothing else."""

from __future__ import annotations

import pytest

from runner.serve import gpus

# cgroup v2 (one line, hierarchy 0) and v1 / hybrid (controllers, name=systemd and hierarchy 0)
V1 = """12:pids:/system.slice/vllm.service
11:memory:/system.slice/vllm.service
3:cpu,cpuacct:/system.slice/vllm.service
1:name=systemd:/system.slice/vllm.service
0::/system.slice/vllm.service
"""


@pytest.mark.parametrize(
    "text, unit",
    [
        ("0::/system.slice/vllm.service\n", "vllm.service"),
        ("0::/system.slice/system-getty.slice/getty@tty1.service\n", "getty@tty1.service"),
        (V1, "vllm.service"),
        ("1:name=systemd:/system.slice/old-sglang.service\n", "old-sglang.service"),
        # a service's own sub-groups (Delegate=yes): the service, never a name inside it
        ("0::/system.slice/docker.service/payload/sshd.service\n", "docker.service"),
        # a user's manager and its units: anyone may name a user unit sshd.service
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/sshd.service\n", None),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service\n", None),
        ("0::/user.slice/user-0.slice/session-4.scope\n", None),
        ("1:name=systemd:/user.slice/user-1000.slice/user@1000.service/sshd.service\n", None),
        # containers and machines: not a unit of this box's manager
        ("0::/system.slice/docker-0123abcd.scope\n", None),
        ("0::/machine.slice/libpod-0123abcd.scope/container/vllm.service\n", None),
        ("0::/\n", None),
        ("0::/init.scope\n", None),
        ("3:cpu,cpuacct:/system.slice/vllm.service\n", None),  # a controller's tree is not systemd's
        ("", None),
        ("0::/sshd.service\n", None),  # outside system.slice
        ("0::/system.slice/sshd.service.d/x\n", None),
    ],
)
def test_only_a_system_service_is_named(text, unit):
    assert gpus.unit_of(text) == unit


def test_the_unit_never_stopped_is_the_one_deploy_installs():
    from deploy.install import UNIT_NAME

    assert gpus.RUNNER_UNIT == UNIT_NAME
