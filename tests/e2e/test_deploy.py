"""`hsx deploy` over the real two-hop SSH path, and the deploy/ files it stands behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from deploy import install
from runner.contract.config import from_dict, load
from runner.contract.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_deploy_installs_records_and_is_idempotent(gpu_box, demo_assets, tmp_path):
    conf = gpu_box.ops_config(str(tmp_path / "job"), demo_assets, "deploytest", 20)
    code, rep = gpu_box.deploy(conf)
    assert code == 0, rep
    prefix = gpu_box.prefix
    assert rep["prefix"] == prefix and rep["preflight"]["ok"]
    rec = rep["record"]
    assert rec["version"] == "0.1.0" and rec["patch"]["sglang"] == "0.5.23" and len(rec["build"]) == 16
    assert rec["supervisor"] == "session" and rec["autostart"] is False
    # the record is in the run directory, and the runner on the box runs the deployed copy
    with open(tmp_path / "job" / "out" / "deploy.json") as f:
        assert json.load(f) == rec
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the box's runner never sees ours
    where = subprocess.run(
        [f"{prefix}/venv/bin/python", "-c", "import runner, bot, deploy; print(runner.__file__, bot.__file__, deploy.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
    ).stdout.split()  # fmt: skip
    assert all(p.startswith(prefix + "/venv/") for p in where), where
    with open(f"{prefix}/deploytest.toml", "rb") as f, open(conf, "rb") as g:
        assert f.read() == g.read()

    code, again = gpu_box.deploy(conf)
    assert code == 0 and again["changed"] == [], again["changed"]
    assert again["record"]["deployed_at"] == rec["deployed_at"]


def test_prefix_must_survive_a_reboot(tmp_path):
    def cfg(runner, rc="/data/hsx/hsx.toml"):
        return from_dict({"remote": {"transport": "ssh", "host": "h", "runner": runner, "runner_config": rc}})

    assert install.prefix_of(cfg("/data/hsx/venv/bin/hsx-runner")) == "/data/hsx"
    for runner, rc, match in [
        ("/tmp/hsx/venv/bin/hsx-runner", "/data/hsx.toml", "wiped at reboot"),
        ("/data/hsx/venv/bin/hsx-runner", "/dev/shm/hsx.toml", "wiped at reboot"),
        ("/data/hsx/bin/hsx-runner", "/data/hsx.toml", "PREFIX/venv/bin/hsx-runner"),
        ("hsx-runner", "/data/hsx.toml", "PREFIX/venv/bin/hsx-runner"),
    ]:
        with pytest.raises(ConfigError, match=match):
            install.prefix_of(cfg(runner, rc))


def test_runner_unit_in_deploy_is_what_deploy_installs():
    with open(os.path.join(ROOT, "deploy", "hsx-runner.service")) as f:
        shipped = f.read()
    assert shipped == install.render_unit("/data/hsx", "/data/hsx/hsx.toml", "/data/eagle3/hs")
    assert (
        "Restart=on-failure" in shipped and "KillSignal=SIGTERM" in shipped and "StartLimitBurst=" in shipped
    )


def test_example_config_loads_and_names_every_key():
    import dataclasses

    from runner.contract.config import Config

    path = os.path.join(ROOT, "deploy", "hsx.example.toml")
    cfg = load(path)
    with open(path) as f:
        text = f.read()
    for section in dataclasses.fields(Config):
        if section.name == "path":
            continue
        assert f"[{section.name}]" in text, section.name
        for key in dataclasses.fields(getattr(cfg, section.name)):
            assert f"\n{key.name} = " in text, f"[{section.name}] {key.name} is not in the example"
    assert cfg.remote.transport == "ssh" and install.prefix_of(cfg) == "/data/hsx"


def test_deploy_refuses_a_wheel_that_is_not_hsx_ops(tmp_path):
    bad = tmp_path / "x.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(install.DeployError, match="not a readable wheel"):
        install.inspect_wheel(str(bad))


def test_cli_reports_a_bad_config_clearly(tmp_path):
    conf = tmp_path / "hsx.toml"
    conf.write_text('[remote]\ntransport = "ssh"\nhost = "h"\nrunner = "/tmp/x/venv/bin/hsx-runner"\n')
    p = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "hsx"), "deploy", "--config", str(conf)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 2 and "wiped at reboot" in p.stdout + p.stderr
