"""The ops side (`pip install 'hsx-ops[bot]'`) never needs torch: importing every ops module
and answering `hsx status` must not load it."""

from __future__ import annotations

import subprocess
import sys


def test_ops_modules_do_not_import_torch():
    code = (
        "import sys\n"
        "import bot.app, bot.cli, bot.watcher, bot.deploy, bot.console, remote.connect, remote.ssh, runner.view\n"
        "heavy = [m for m in ('torch', 'transformers', 'sglang', 'aiohttp') if m in sys.modules]\n"
        "print(heavy); sys.exit(1 if heavy else 0)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
