"""The story a new user follows, all real: `hsx demo --backend sglang` runs its whole pipeline from
one command: the target regenerates the demo's answers through the real SGLang, the patched SGLang
extracts the regenerated rows, SpecForge's trainer trains the draft on them (3 samples held out for
its eval), the end exports it and the draft is measured in the real SGLang: the target alone, then
the draft at the demo's two settings, each a fresh server. The measured accept length is the one
recomputed from the kept meta_info, above 1.0, beside the simulated one in the same units; the
serve command is the one that ran, the pipeline's done record carries the measured draft, and
the chart draws."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from bot.render import measure_chart
from runner.contract.config import load
from runner.contract.measure import MeasureRecord
from runner.sglang_cpu import SPECULATIVE
from runner.text.measure import render_measure
from tests.conftest import BIN, runner, specforge_train_python

pytestmark = pytest.mark.slow
SAMPLES = 12


def _status(conf, kind) -> dict:
    p = runner(kind, "status", "--json", "--config", conf, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_the_demo_runs_its_whole_pipeline_in_sglang_and_measures_its_draft(tmp_path, sglang_python):
    specforge_train_python()
    work = tmp_path / "d"
    p = subprocess.run([os.path.join(BIN, "hsx"), "demo", "--backend", "sglang", "--headless", "--workdir",
                        str(work), "--samples", str(SAMPLES)], capture_output=True, text=True, timeout=2400)  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert (
        "pipeline done" in p.stdout
        and "regenerate done → extract done → train done → measure done" in p.stdout
    )
    conf = str(work / "hsx.toml")
    cfg = load(conf)
    assert cfg.pipeline.stages == ["regenerate", "extract", "train", "measure"]
    assert cfg.job.dataset == str(work / "data.regenerated.jsonl")  # the extraction read the target's answers
    assert cfg.train.measure_at_end and cfg.train.eval_samples == 3 and len(cfg.measure.settings) == 2
    pipe = _status(conf, "pipeline")
    assert pipe["phase"] == "done" and pipe["handed"][-1].startswith("measure: measured accept length"), pipe
    regen = _status(conf, "regenerate")
    assert (regen["phase"], regen["done"], regen["failed"]) == ("done", SAMPLES, 0), regen

    trained = _status(conf, "train")
    assert trained["phase"] == "done" and trained["export_ok"], trained
    # the training's end started the measurement itself; the pipeline waited on it
    assert trained["measure_ok"] and trained["measure"].startswith("measurement started (measure_at_end)"), (
        trained
    )
    st = _status(conf, "measure")
    assert st["phase"] == "done", st
    assert st["accept_length"] > 1.0, st
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
