"""The end-to-end world: two real sshd (jump + 'GPU box' = this machine), `hsx deploy` into a
persistent prefix, the bot over real HTTP with signed requests, its Web API pointed at a local
recording server, and the watcher on its real scheduler.

The deployed venv reuses the test interpreter's packages (`hsx deploy --deps-from`) instead
of downloading torch: the documented option for boxes whose image already has them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from runner.ports import free_port
from tests import sshd
from tests.bot.http_bot import serve
from tests.conftest import write_config, write_job
from tests.ticks import Ticks

HSX = os.path.join(os.path.dirname(sys.executable), "hsx")
REQUIRE_ENV = sshd.REQUIRE_ENV
need_sshd = sshd.need_sshd
OPERATOR, STRANGER = "U0OPERATOR", "U0STRANGER"


class GpuBoxWorld:
    """The sshd pair, the deploy prefix (outside /tmp: deploy refuses paths wiped at reboot) and
    the session's wheel."""

    def __init__(self, pair: sshd.TwoHop, prefix: str, wheel: str):
        self.pair, self.prefix, self.wheel = pair, prefix, wheel

    def ops_config(self, job_dir: str, assets, name: str, samples: int, **job) -> str:
        """Write the job (dataset rows) and one hsx.toml for both sides, paths absolute."""
        write_job(job_dir, assets, samples)  # the dataset; its config is replaced below
        p = self.pair
        sections = {
            "job": {
                "name": name, "model": os.path.join(str(assets), "model"),
                "dataset": os.path.join(job_dir, "data.jsonl"), "out": os.path.join(job_dir, "out"),
                "max_length": 256, "concurrency": 1, "status_interval_s": 0.3, "rate_window_s": 30.0,
                "max_consecutive_failures": 10, "retries": 3, **job,
            },
            "server": {"backend": "reference", "threads": 1, "port": free_port(), "start_timeout_s": 120.0},
            "remote": {
                "transport": "ssh", "host": p.target.addr, "port": p.target.port, "user": p.user,
                "jump": p.jump_spec, "identity_file": p.client_key, "known_hosts": p.known_hosts,
                "runner": f"{self.prefix}/venv/bin/hsx-runner", "runner_config": f"{self.prefix}/{name}.toml",
                "command_timeout_s": 30.0,  # a stuck call must not hold the watcher's single tick for long
            },
            "slack": {
                "channels": ["C0PROGRESS"], "alert_channel": "C0ALERTS", "operators": [OPERATOR],
                "audit_log": os.path.join(job_dir, "ops", "audit.jsonl"),
            },
            "watcher": {"interval_s": 0.5, "milestone_pct": 10, "state_file": os.path.join(job_dir, "ops", "watch.json")},
        }  # fmt: skip
        return write_config(os.path.join(job_dir, "hsx.toml"), **sections)

    def deploy(self, conf: str, *extra: str) -> tuple[int, dict]:
        p = subprocess.run(
            [HSX, "deploy", "--config", conf, "--json", "--deps-from", sys.executable, "--wheel", self.wheel,
             *extra],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        try:
            return p.returncode, json.loads(p.stdout)
        except json.JSONDecodeError:
            raise AssertionError(f"hsx deploy -> {p.returncode}\n{p.stdout}\n{p.stderr}") from None


@pytest.fixture(scope="session")
def hsx_wheel(tmp_path_factory) -> str:
    """One hsx-ops wheel from this checkout, built the way `hsx deploy` builds one, for every
    deploy of the session."""
    from deploy.install import build_wheel

    return build_wheel(str(tmp_path_factory.mktemp("wheel")))


@pytest.fixture(scope="session")
def gpu_box(tmp_path_factory, hsx_wheel):
    need_sshd()
    pair = sshd.TwoHop(str(tmp_path_factory.mktemp("sshd")))
    prefix = os.path.join(os.path.expanduser("~"), ".cache", "hsx-tests", f"e2e-{uuid.uuid4().hex[:8]}")
    try:
        pair.setup()
        with open(pair.target.config, "a") as f:
            f.write("Subsystem sftp internal-sftp\n")  # deploy uploads over SFTP, as a stock sshd allows
        pair.start()
        yield GpuBoxWorld(pair, prefix, hsx_wheel)
    finally:
        pair.stop()
        shutil.rmtree(prefix, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(prefix))  # only when no other run's prefix is there


class Ops:
    """The ops side as it runs in production: `hsx bot --http` wiring plus the watcher."""

    def __init__(self, conf: str):
        from bot.watch.watcher import start_watcher
        from runner.contract.config import load

        self.cfg = load(conf)
        self._stack = contextlib.ExitStack()
        self.bot, app, self.rt = self._stack.enter_context(serve(self.cfg))
        self._stack.callback(self.rt.handlers.box.close)
        self.rec = self.bot.rec
        self.scheduler = start_watcher(self.rt.handlers.box, self.cfg, app.client, live=self.rt.handlers.live)
        self.ticks = Ticks(self.scheduler)

    def close(self) -> None:
        self.scheduler.shutdown(wait=True)
        self._stack.close()

    def posts(self, channel: str, needle: str) -> list[dict]:
        return [
            p
            for p in self.rec.named("chat.postMessage")
            if p.get("channel") == channel and needle in p.get("text", "")
        ]
