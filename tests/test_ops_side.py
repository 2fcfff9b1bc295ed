"""The ops side (`pip install 'hsx-ops[bot]'`) never needs torch: importing every ops module
and answering `hsx status` must not load it."""

from __future__ import annotations

import subprocess
import sys

from runner.contract.status import Phase, StatusRecord, write_record
from tests.conftest import RUNNER, write_config

CHECK = (
    "import sys\n"
    "import bot.slack.app, bot.cli, bot.watch.watcher, bot.terminal.console, deploy.install, remote.connect, remote.ssh, runner.job.view\n"
    "{body}"
    "heavy = [m for m in ('torch', 'transformers', 'sglang', 'aiohttp') if m in sys.modules]\n"
    "print(heavy); sys.exit(1 if heavy else 0)\n"
)


def test_ops_modules_do_not_import_torch():
    p = subprocess.run([sys.executable, "-c", CHECK.format(body="")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_hsx_status_answers_without_torch(tmp_path, patient):
    """Of what answers, not when: the child reads HSX_TIMING=patient."""
    out = tmp_path / "out"
    out.mkdir()
    write_record(str(out / "status.json"), StatusRecord(job="j", phase=Phase.DONE, total=3, done=3))
    conf = tmp_path / "hsx.toml"
    write_config(
        conf,
        job={"model": "m", "dataset": "d.jsonl", "out": "out"},
        remote={"transport": "local", "runner": RUNNER, "runner_config": conf},
    )
    body = f"rc = bot.cli.main(['status', '--config', {str(conf)!r}])\nassert rc == 0, rc\n"
    p = subprocess.run([sys.executable, "-c", CHECK.format(body=body)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Done: 3 / 3 written" in p.stdout
