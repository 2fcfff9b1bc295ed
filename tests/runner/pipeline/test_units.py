"""The pipeline's pure parts: which runs of stages a config may name, the extraction reading the
regenerated dataset, the record's checks, each stage's hand-on checks and the text."""

from __future__ import annotations

import pytest

from runner.contract.config import ConfigError, from_dict
from runner.contract.errors import StatusError
from runner.contract.pipeline import PipelineRecord, check_stages
from runner.pipeline.stages import STAGES, WAIT
from runner.text.pipeline import line, render_pipeline


@pytest.mark.parametrize(
    "stages",
    [["regenerate"], ["regenerate", "extract"], ["extract", "train", "measure"], ["train", "measure"]],
)
def test_a_run_of_the_stages_in_order_is_a_pipeline(stages):
    assert check_stages(stages) is None


@pytest.mark.parametrize(
    "stages,why",
    [([], "non-empty"), (["extract", "regenerate"], "in order"), (["regenerate", "train"], "in order"),
     (["extract", "extract"], "in order"), (["ship"], "unknown stage 'ship'"), ("extract", "non-empty")],
)  # fmt: skip
def test_anything_else_is_refused_by_name(stages, why):
    assert why in check_stages(stages)
    if stages:
        with pytest.raises(ConfigError, match=r"\[pipeline\]"):
            from_dict({"train": {"python": "auto"}, "pipeline": {"stages": stages}})


def test_a_pipeline_that_regenerates_then_extracts_extracts_the_regenerated_dataset():
    job = {"dataset": "data.jsonl", "model": "m", "out": "out"}
    cfg = from_dict({"job": job, "pipeline": {"stages": ["regenerate", "extract"]}}, "/w")
    assert (cfg.regenerate.input, cfg.job.dataset) == ("/w/data.jsonl", "/w/data.regenerated.jsonl")
    named = {
        "job": job,
        "regenerate": {"output": "new.jsonl"},
        "pipeline": {"stages": ["regenerate", "extract"]},
    }
    assert from_dict(named, "/w").job.dataset == "/w/new.jsonl"
    alone = from_dict({"job": job, "pipeline": {"stages": ["regenerate"]}}, "/w")
    assert alone.job.dataset == "/w/data.jsonl"  # nothing extracts it: the job's dataset stays
    with pytest.raises(ConfigError, match=r"\[train\] python"):
        from_dict({"job": job, "pipeline": {"stages": ["extract", "train"]}}, "/w")


def test_the_record_refuses_an_unknown_stage_or_phase():
    assert PipelineRecord.from_dict({"phase": "running", "stage": "train", "stages": ["train"]}).active
    with pytest.raises(StatusError, match="unknown stage"):
        PipelineRecord.from_dict({"phase": "running", "stage": "ship"})
    with pytest.raises(StatusError, match="unknown phase 'extracting'"):
        PipelineRecord.from_dict({"phase": "extracting"})
    with pytest.raises(StatusError, match="handed"):
        PipelineRecord.from_dict({"phase": "done", "handed": [3]})


def test_a_done_stage_hands_on_only_when_its_checks_pass(tmp_path):
    out = tmp_path / "new.jsonl"
    assert "missing" in STAGES["regenerate"].check({"output": str(out), "total": 2, "failed": 0})
    out.write_text("{}\n")
    assert STAGES["regenerate"].check({"output": str(out), "total": 2, "failed": 0}) is None
    assert "no row" in STAGES["regenerate"].check({"output": str(out), "total": 2, "failed": 2})
    assert STAGES["extract"].check({"handoff": "pending"}) == WAIT
    assert "not verified" in STAGES["extract"].check(
        {"handoff": "training not started: the features are not verified: x"}
    )
    assert STAGES["train"].check({"export": "pending"}) == WAIT
    assert "export failed" in STAGES["train"].check({"export": "no room", "export_ok": False})
    assert STAGES["train"].check({"export": "exported", "export_ok": True}) is None


def test_the_text_names_the_stage_first_then_each_stage():
    d = {"phase": "running", "started_at": "2026-12-05T00:00:00Z", "stage": "extract",
         "stages": ["regenerate", "extract", "train"], "handed": ["regenerate: 16 rows regenerated into /x"],
         "phases": {"regenerate": "done", "extract": "extracting", "train": "stopped"},
         "current": {"phase": "extracting", "done": 4, "total": 16, "eta_s": 30.0}}  # fmt: skip
    assert line(d) == "pipeline running · stage 2 of 3: extract (extracting, 4 / 16 samples (25.0%))"
    text = render_pipeline(d)
    assert text.splitlines()[1] == "regenerate done → extract extracting → train waiting"  # not reached
    assert "ETA ~30s" in text and "handed on: regenerate: 16 rows" in text
    assert "/x" not in render_pipeline(d, full=False)
    assert render_pipeline({"phase": "stopped"}) == "pipeline: not started (`/pipeline start`)"


def test_the_regenerations_hand_off_says_the_rows_cut_at_their_token_limit():
    said = STAGES["regenerate"].said
    assert said({"total": 9, "failed": 1, "output": "/o.jsonl"}) == "8 rows regenerated into /o.jsonl"
    assert said({"total": 9, "failed": 1, "cut": 3, "output": "/o.jsonl"}) == (
        "8 rows regenerated (3 with an answer cut at the token limit) into /o.jsonl"
    )


def test_the_trainings_hand_off_says_whether_the_draft_learned():
    """The pipeline's end is where a newcomer of `hsx demo --headless` reads the training: its
    top-1 acc where it started and at the end, beside the export."""
    said = STAGES["train"].said
    d = {"export_dir": "/w/out-train/export", "acc_start": 0.0855, "acc_mean": 0.2624}
    assert said(d) == (
        "the draft trained (draft top-1 acc 8.6% over its first 10 steps, 26.2% at the end) "
        "and exported to /w/out-train/export"
    )
    assert said({"export_dir": "/e", "acc_mean": 0.3}) == "the draft trained and exported to /e"  # < 10 steps
