"""Both CLIs get piped into `head`: a reader that went away ends them quietly, code 141 as a
shell reports a tool ended by SIGPIPE, with no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.bot.conftest import EXTRACTING
from tests.conftest import write_config


def into_closed_pipe(*argv: str) -> subprocess.CompletedProcess:
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first byte, as after `| head -c 1` has its byte
    try:
        return subprocess.run([sys.executable, "-m", *argv], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=60)  # fmt: skip
    finally:
        os.close(w)


def quiet(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
    assert p.returncode == 141, (p.returncode, p.stderr)


def test_the_runner_cli_piped_into_a_reader_that_left(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "status.json").write_text(json.dumps(EXTRACTING))
    conf = tmp_path / "hsx.toml"
    write_config(conf, job={"name": "eagle3", "model": "m", "dataset": "d.jsonl", "out": "out"})
    quiet(into_closed_pipe("runner.cli", "status", "--json", "--config", str(conf)))
