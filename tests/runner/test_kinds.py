"""runner.kinds: the one place each kind's action is answered, for the CLI (which prints it) and
the pipeline (which reads it in its own process, typed, never through the CLI)."""

from __future__ import annotations

import json
import os

import pytest

from runner import kinds
from runner.contract.config import load
from runner.contract.replies import BROKEN, OK, REFUSED
from runner.pipeline import stages
from tests.conftest import runner, write_config

VERB = {"extract": (), "train": ("train",), "measure": ("measure",), "regenerate": ("regenerate",)}


@pytest.fixture
def conf(tmp_path):
    return write_config(
        tmp_path / "hsx.toml",
        job={"model": "m", "dataset": str(tmp_path / "d.jsonl"), "out": str(tmp_path / "out")},
    )


def test_every_stage_is_a_kind_and_every_kind_is_a_verb():
    assert set(kinds.KINDS) == set(stages.STAGES) == set(VERB)


@pytest.mark.parametrize("kind", sorted(VERB))
def test_the_cli_prints_what_the_pipeline_reads(conf, kind):
    code, d = kinds.call(kind, load(conf), "status")
    p = runner(*VERB[kind], "status", "--json", "--config", conf)
    assert (code, p.returncode) == (OK, OK) and json.loads(p.stdout) == d
    assert d["phase"] == "stopped" and d["reason"] == "not started yet"
    assert not stages.Stage.started(d)  # the pipeline starts it, not resumes


def test_a_broken_record_is_said_to_the_pipeline_not_raised(conf):
    cfg = load(conf)
    root = os.path.join(os.path.dirname(conf), "out-measure")
    os.makedirs(root)
    with open(os.path.join(root, "status.json"), "w") as f:
        f.write('{"phase": "sideways"}')
    code, d = kinds.call("measure", cfg, "status")
    assert code == BROKEN and "unknown phase" in d["reason"]
    assert stages.STAGES["measure"].status(cfg) == {"phase": "failed", "reason": d["reason"]}
    p = runner("measure", "status", "--json", "--config", conf)
    assert p.returncode == BROKEN and "unknown phase" in json.loads(p.stdout)["reason"]


def test_a_refusal_carries_its_reason_and_its_code(conf):
    code, d = kinds.call("measure", load(conf), "resume")
    assert code == REFUSED and d["ok"] is False and d["reason"], d
    p = runner("measure", "resume", "--json", "--config", conf)
    assert p.returncode == REFUSED and json.loads(p.stdout) == d
