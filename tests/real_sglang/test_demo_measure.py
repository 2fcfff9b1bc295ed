"""The story a new user follows, all real: `hsx demo --backend sglang` extracts through the patched
SGLang, `hsx-runner train start` trains the draft with SpecForge's trainer (3 samples held out for
its eval), the end exports it and, as the demo's `[train] measure_at_end` asks, measures it in the
real SGLang: the target alone, then the draft at the demo's two settings, each a fresh server.
The measured accept length is the one recomputed from the kept meta_info, it reads beside the
simulated one in the same units, the serve command is the one that ran, and the chart draws."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from bot.render import measure_chart
from runner import specforge_cpu
from runner.contract.config import load
from runner.contract.measure import MeasureRecord
from runner.sglang_cpu import SPECULATIVE
from runner.text.measure import render_measure
from tests.conftest import BIN, ROOT, runner
from tests.sshd import skip_or_fail

pytestmark = pytest.mark.slow
SAMPLES = 12


def _status(conf, kind) -> dict:
    p = runner(kind, "status", "--json", "--config", conf, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def _until(conf, kind, active, timeout_s) -> dict:
    deadline = time.monotonic() + timeout_s
    while (st := _status(conf, kind))["phase"] in active:
        assert time.monotonic() < deadline, st
        time.sleep(1.0)
    return st


def test_the_demos_trained_draft_is_measured_in_sglang_at_the_trainings_end(tmp_path, sglang_python):
    if specforge_cpu.python_of(os.path.join(ROOT, ".cache")) is None:
        skip_or_fail(
            "no SpecForge CPU venv (python -m runner.specforge_cpu .cache)", "HSX_REQUIRE_SPECFORGE_TRAIN"
        )
    work = tmp_path / "d"
    p = subprocess.run([os.path.join(BIN, "hsx"), "demo", "--backend", "sglang", "--headless", "--workdir",
                        str(work), "--samples", str(SAMPLES)], capture_output=True, text=True, timeout=900)  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    conf = str(work / "hsx.toml")
    cfg = load(conf)
    assert cfg.train.measure_at_end and cfg.train.eval_samples == 3 and len(cfg.measure.settings) == 2

    p = runner("train", "start", "--json", "--config", conf, timeout=600)
    assert p.returncode == 0 and json.loads(p.stdout)["started"], p.stdout + p.stderr
    trained = _until(conf, "train", ("preflight", "loading", "training"), 900)
    assert trained["phase"] == "done" and trained["export_ok"], trained
    assert trained["measure_ok"] and trained["measure"].startswith("measurement started (measure_at_end)"), (
        trained
    )

    st = _until(conf, "measure", ("preflight", "starting_server", "measuring"), 1800)
    assert st["phase"] == "done", st
    _measured(cfg, st, trained)


def _measured(cfg, st: dict, trained: dict) -> None:
    """What a done measurement of the demo's trained draft holds."""
    with open(os.path.join(st["run_dir"], "prompts.json")) as f:
        plan = json.load(f)
    held = len(plan["prompts"])
    assert plan["rows"] == "the training's held-out rows" and held == min(
        cfg.measure.samples, cfg.train.eval_samples
    )
    total = held * (1 + len(cfg.measure.settings))
    lines = [json.loads(x) for x in open(st["results"]) if x.strip()]
    keys = [(r["setting"], r["prompt"]) for r in lines]
    assert len(keys) == len(set(keys)) == st["done"] == st["total"] == total
    by = {f["setting"]: f for f in st["settings"]}
    for s in cfg.measure.settings:
        mine = [r for r in lines if r["setting"] == s]
        tokens = sum(r["meta_info"]["completion_tokens"] for r in mine)
        verify = sum(r["meta_info"]["spec_verify_ct"] for r in mine)
        assert by[s]["accept_length"] == pytest.approx(tokens / verify) and by[s]["accept_length"] >= 1.0
        assert by[s]["same"] + len(by[s]["differ"]) == held  # each output compared
        assert all(len(d) == 3 for d in by[s]["differ"])  # each difference with the target's margin there
    # the simulated figure of the exported step, in SGLang's units, beside the measured one
    assert (
        st["simulated"] == pytest.approx(trained["acc_len"] + 1) and st["export_dir"] == trained["export_dir"]
    )
    rec = MeasureRecord.from_dict(st)
    said = render_measure(rec)
    assert (
        f"measured accept length {st['accept_length']:.2f} ({st['best']}) · simulated {st['simulated']:.2f}"
        in said
    )
    # the serve command is the best setting's server as it ran: the lane's attention, the draft
    assert " ".join(SPECULATIVE) in st["serve_command"]
    assert f"--speculative-draft-model-path {trained['export_dir']}" in st["serve_command"]
    assert st["best"] in cfg.measure.settings
    assert measure_chart.enough(rec) and measure_chart.render_png(rec).startswith(b"\x89PNG")
