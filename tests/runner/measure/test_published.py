"""The published figures a measured draft is set beside (runner/assets/published.json, from
SpecForge's SpecBundle): chosen by [measure] reference, refused when it names no published
target, carried by `measure status` for this run's settings and said beside its own figures."""

from __future__ import annotations

import json
import os

import pytest

from runner.contract.config import from_dict
from runner.contract.errors import StatusError
from runner.contract.measure import MeasureRecord
from runner.measure import control, published
from runner.text.measure import render_measure


def test_the_table_names_its_source_and_holds_the_figures_the_issue_quotes():
    assert "SpecBundle" in published.source() and "/blob/" in published.source()
    kimi = {(p["benchmark"], p["batch"]): p for p in published.beside("kimi-k2-instruct", ["3/1/4"])}
    # Kimi-K2-Instruct at 3/1/4, batch 8, as SpecBundle publishes it
    assert (kimi["mtbench", 8]["accept_length"], kimi["gsm8k", 8]["accept_length"]) == (2.39, 3.27)
    assert kimi["math500", 8]["accept_length"] == 3.47 and kimi["mtbench", 8]["speedup"] > 1
    assert kimi["mtbench", 8]["source"] == "SpecForge's SpecBundle"
    assert {p["setting"] for p in published.beside("Kimi-K2-Instruct", ["3/1/4", "7/4/8"])} == {
        "3/1/4",
        "7/4/8",
    }
    assert published.beside("", ["3/1/4"]) == [] and published.beside("Kimi-K2-Instruct", ["2/1/3"]) == []


def test_a_reference_that_names_no_published_target_is_refused_naming_the_known_ones(tmp_path):
    assert published.refusal("") is None and published.refusal("KIMI-K2-INSTRUCT") is None
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    conf = {"job": {"model": str(tmp_path / "model"), "out": str(tmp_path / "out")}, "server": {"backend": "sglang"},
            "measure": {"draft": str(draft), "reference": "Kimi-K3"}}  # fmt: skip
    said = control.start(from_dict(conf))
    assert said.code == 3 and "[measure] reference 'Kimi-K3'" in said.text and "Kimi-K2-Instruct" in said.text
    assert not os.path.exists(tmp_path / "out-measure")  # nothing claimed


def test_status_carries_the_reference_figures_at_this_runs_settings_and_says_them_beside_its_own(tmp_path):
    conf = {"job": {"model": str(tmp_path / "model"), "out": str(tmp_path / "out")}, "server": {"backend": "sglang"},
            "measure": {"reference": "Kimi-K2-Instruct", "settings": ["3/1/4"]}}  # fmt: skip
    d = json.loads(json.dumps(control.status(from_dict(conf)).payload()))
    assert d["reference"] == "Kimi-K2-Instruct" and {p["setting"] for p in d["published"]} == {"3/1/4"}
    rec = MeasureRecord.from_dict(
        {**d, "phase": "done", "settings": [{"setting": "none", "requests": 4},
                                            {"setting": "3/1/4", "requests": 4, "accept_length": 2.1}]}
    )  # fmt: skip
    text = render_measure(rec)
    line = next(
        x for x in text.splitlines() if x.startswith("published for Kimi-K2-Instruct at 3/1/4, batch 8")
    )
    assert "MT-Bench 2.39 (" in line and "GSM8K 3.27" in line and line.endswith("— 2.10 here"), line
    assert "one at a time, so set beside, not the same test" in text
    with pytest.raises(StatusError, match="published 0"):
        MeasureRecord.from_dict({**d, "published": ["2.39"]})
    assert "published for" not in render_measure(MeasureRecord.from_dict({**d, "published": []}))
