"""`hsx deploy` over the real two-hop SSH path, and the deploy/ files it stands behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from deploy import install
from runner.contract.config import from_dict, load
from runner.contract.errors import ConfigError
from tests.runner.train.units import UNIFIED, _fake_python
from tests.sshd import skip_or_fail

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _with_train(conf: str, python: str) -> None:
    with open(conf, "a") as f:
        f.write(f'[train]\npython = "{python}"\n')


def test_deploy_installs_records_and_is_idempotent(gpu_box, demo_assets, tmp_path):
    conf = gpu_box.ops_config(str(tmp_path / "job"), demo_assets, "deploytest", 20)
    _with_train(conf, _fake_python(tmp_path, "sf", "0.2.0", UNIFIED))
    code, rep = gpu_box.deploy(conf)
    assert code == 0, rep
    # [train] set: the box's runner checked its interpreter (hsx-runner train setup)
    assert rep["train"]["ok"] and rep["train"]["version"] == "0.2.0", rep["train"]
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
    assert again["record"]["deployed_at"] == rec["deployed_at"] and again["train"]["ok"]

    with open(conf) as f:  # an interpreter whose specforge is the legacy one: deployed, and said
        text = f.read().rsplit("[train]", 1)[0]
    with open(conf, "w") as f:
        f.write(text)
    _with_train(
        conf, _fake_python(tmp_path, "legacy", "0.2.0", "def main(argv=None):\n    raise SystemExit(2)\n")
    )
    code, bad = gpu_box.deploy(conf)
    assert code == 1 and not bad["ok"] and "legacy" in bad["train"]["reason"], bad


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


def test_unit_paths_are_escaped_as_systemd_reads_them():
    unit = install.render_unit("/data/my hsx%1", "/data/my hsx%1/job $HOME.toml", "/data/eagle 3/hs")
    assert "\nWorkingDirectory=/data/my hsx%%1\n" in unit  # not unquoted by systemd: taken whole
    assert (
        '\nExecStart="/data/my hsx%%1/venv/bin/hsx-runner" run --config "/data/my hsx%%1/job $$HOME.toml"\n'
        in unit
    )
    assert '\nRequiresMountsFor="/data/eagle 3/hs"\n' in unit  # a list of paths: quoted as one


@pytest.mark.parametrize(
    "prefix,config,out,match",
    [
        ("/data/hsx", "/data/hsx/hsx.toml", "/data/out\nExecStartPre=/bin/sh", "out .* control character"),
        ("/data/hsx", "/data/hsx/a\tb.toml", "/data/out", "runner_config .* control character"),
        ("/data/h\x7fsx", "/data/hsx.toml", "/data/out", "prefix .* control character"),
        ('/data/h"sx', "/data/hsx.toml", "/data/out", "prefix .* systemd cannot"),
        ("/data/hsx", "/data/it's.toml", "/data/out", "runner_config .* systemd cannot"),
        ("/data/hsx", "/data/hsx.toml", "/data/out\\", "out .* systemd cannot"),
        ("/data/hsx ", "/data/hsx.toml", "/data/out", "prefix .* ends with a space"),
    ],
)
def test_unit_paths_systemd_cannot_take_are_refused(prefix, config, out, match):
    with pytest.raises(ConfigError, match=match):
        install.render_unit(prefix, config, out)


def test_systemd_reads_an_escaped_unit_as_meant(tmp_path):
    """systemd's own parser (`systemd-analyze verify`): the executable is found, every path absolute."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        skip_or_fail("systemd-analyze is not installed (apt-get install systemd)", "HSX_REQUIRE_SYSTEMD")
    prefix = tmp_path / "my hsx%1 $x"
    (prefix / "venv" / "bin").mkdir(parents=True)
    exe = prefix / "venv" / "bin" / "hsx-runner"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    unit = tmp_path / install.UNIT_NAME
    unit.write_text(install.render_unit(str(prefix), f"{prefix}/job %n.toml", str(tmp_path / "out dir")))
    p = subprocess.run([analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True)
    assert p.returncode == 0 and "not absolute" not in p.stderr and "not executable" not in p.stderr, p.stderr


def test_deploy_refuses_a_path_a_unit_cannot_hold_before_touching_the_box(gpu_box, demo_assets, tmp_path):
    out = str(tmp_path / "job" / "out\nExecStartPre=/bin/touch /tmp/hsx-injected")
    conf = gpu_box.ops_config(str(tmp_path / "job"), demo_assets, "badunit", 5, out=out)
    code, rep = gpu_box.deploy(conf)
    assert code == 2 and not rep["ok"]
    assert "[job] out" in rep["error"] and "control character" in rep["error"]
    assert not os.path.exists(out) and not os.path.exists(f"{gpu_box.prefix}/badunit.toml")


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
