"""`hsx demo --backend sglang --target kimi-k2.5 --tp 2`: the whole demo through the real
patched SGLang on this CPU, as the README says to run it: Kimi-K2.5's own wrapper class, two
scheduler processes. (The demo's Llama takes the same path with its own attention flags; the
Llama runs in test_equal_to_reference.py and test_tp_faults.py.)"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import BIN
from tests.runner.helpers import verify


@pytest.mark.parametrize(
    "options,model_class",
    [(["--target", "kimi-k2.5"], "KimiK25ForConditionalGeneration")],  # TP 2: test_equal_to_reference
)
def test_demo_through_the_real_sglang(tmp_path, sglang_python, options, model_class):
    work = tmp_path / "d"
    p = subprocess.run(
        [os.path.join(BIN, "hsx"), "demo", "--stages", "extract", "--backend", "sglang", *options, "--headless", "--workdir", str(work),
         "--samples", "12"],
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
        "hsx dump patch for SGLang 0.5.23" in log and f"{model_class} captures the outputs of layers" in log
    )
    tp = int(options[-1]) if "--tp" in options else 1
    assert all(f"installed in TP{r} pid" in log for r in range(tp)) and f"installed in TP{tp} " not in log
