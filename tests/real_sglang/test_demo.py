"""`hsx demo --backend sglang`: the whole demo through the real patched SGLang on this CPU."""

from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import BIN
from tests.runner.helpers import verify


def test_demo_through_the_real_sglang(tmp_path, sglang_python):
    work = tmp_path / "d"
    p = subprocess.run(
        [os.path.join(BIN, "hsx"), "demo", "--backend", "sglang", "--headless", "--workdir", str(work), "--samples", "12"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "Done: 12 / 12 written" in p.stdout
    conf = str(work / "hsx.toml")
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 12
    with open(work / "out" / "status.json") as f:
        assert json.load(f)["server"]["backend"] == "sglang"
    with open(work / "out" / "logs" / "server.log") as f:
        log = f.read()
    assert (
        "hsx dump patch for SGLang 0.5.23" in log and "LlamaForCausalLM captures the outputs of layers" in log
    )
