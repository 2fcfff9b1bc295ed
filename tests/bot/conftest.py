"""Fixtures: a GPU box behind LocalTransport whose `hsx-runner` is tests/bot/fake_runner.py."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from remote.client import GpuBox
from remote.transport import LocalTransport
from runner.contract.config import from_dict

HERE = os.path.dirname(os.path.abspath(__file__))

EXTRACTING = {
    "schema": 1,
    "job": "eagle3",
    "phase": "extracting",
    "host": "gpu-1",
    "pid": 4242,
    "alive": True,
    "heartbeat_at": "2030-01-01T11:42:50Z",
    "started_at": "2030-01-01T09:00:00Z",
    "phase_since": "2030-01-01T09:12:00Z",
    "total": 37312,
    "done": 25581,
    "done_this_run": 7160,
    "failed": 0,
    "errors_this_run": 0,
    "rate": 1.16,
    "rate_trend": "steady",
    "tokens_per_s": 4100.0,
    "eta_s": 10150,
    "disk": {
        "path": "/data",
        "used": 3_300_000_000_000,
        "free": 8_500_000_000_000,
        "need": 1_500_000_000_000,
    },
    "server": {"backend": "sglang", "restarts": 0},
    "last_error": None,
}


class FakeBox:
    """The fixture folder: what the fake runner answers and what it was asked."""

    def __init__(self, folder: str):
        self.folder = folder
        self.runner = os.path.join(folder, "hsx-runner")
        self.config = os.path.join(folder, "job.toml")
        with open(os.path.join(HERE, "fake_runner.py")) as f:
            body = f.read()
        with open(self.runner, "w") as f:
            f.write(f"#!{sys.executable}\n{body}")
        os.chmod(self.runner, os.stat(self.runner).st_mode | stat.S_IXUSR)
        open(self.config, "w").close()
        self.set_status(EXTRACTING)

    def set_status(self, rec: dict | None = None, **changes) -> None:
        d = dict(rec or self.status_dict())
        d.update(changes)
        self.reply("status", d)

    def status_dict(self) -> dict:
        with open(os.path.join(self.folder, "status.json")) as f:
            return json.load(f)

    def reply(self, verb: str, body: dict | str, code: int = 0) -> None:
        with open(os.path.join(self.folder, f"{verb}.json"), "w") as f:
            f.write(body if isinstance(body, str) else json.dumps(body))
        with open(os.path.join(self.folder, f"{verb}.code"), "w") as f:
            f.write(str(code))

    def calls(self) -> list[list[str]]:
        try:
            with open(os.path.join(self.folder, "argv.jsonl")) as f:
                return [json.loads(x) for x in f]
        except FileNotFoundError:
            return []

    def verbs(self) -> list[str]:
        return [c[0] for c in self.calls()]

    def argv(self, kind: str, action: str) -> list[str]:
        """What the box is asked for a kind's action (``regenerate start``), as the fake records it."""
        return [kind, "--json", "--config", self.config, action]

    def box(self) -> GpuBox:
        return GpuBox(LocalTransport(), self.runner, self.config, timeout_s=20)


@pytest.fixture
def fake(tmp_path) -> FakeBox:
    d = tmp_path / "gpu"
    d.mkdir()
    return FakeBox(str(d))


@pytest.fixture
def conf(fake, tmp_path) -> str:
    """An ops config (`hsx --config`) whose box is the fake runner on this machine."""
    path = tmp_path / "hsx.toml"
    path.write_text(
        f'[remote]\ntransport = "local"\nrunner = "{fake.runner}"\nrunner_config = "{fake.config}"\n'
    )
    return str(path)


@pytest.fixture
def cfg(tmp_path, fake):
    return from_dict(
        {
            "remote": {"transport": "local", "runner": fake.runner, "runner_config": fake.config},
            "slack": {
                "channels": ["C0PROGRESS"],
                "alert_channel": "C0ALERTS",
                "operators": ["U0OPERATOR"],
                "audit_log": str(tmp_path / "ops" / "audit.jsonl"),
            },
            "watcher": {
                "interval_s": 1.0,
                "milestone_pct": 10,
                "state_file": str(tmp_path / "ops" / "watch.json"),
            },
        },
        base_dir=str(tmp_path),
        source=str(tmp_path / "hsx.toml"),
    )
