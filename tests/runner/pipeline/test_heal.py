"""The pipeline heals its stages: a stage this launch started that crashes is resumed by the
supervisor itself, within ``[pipeline] max_resumes``, each resume said in the record; one that
crashes again without progress, past the budget, or fails for a reason of its own ends the
pipeline with that reason. The supervisor's loop against a scripted stage (the real stages'
kills are tests/runner/pipeline/test_pipeline.py's)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from runner.contract.status import NOT_STARTED
from runner.pipeline import record
from runner.pipeline.supervisor import Pipeline
from tests.conftest import write_config

NEVER = {"phase": "stopped", "reason": NOT_STARTED}


def crashed(done: int) -> dict:
    return {"phase": "crashed", "done": done, "total": 400, "reason": "runner (pid 1) is gone"}


@dataclass
class Scripted:
    """A stage whose status is read from a script, one reply a read, the last kept."""

    replies: list
    name: str = "extract"
    asked: list = field(default_factory=list)

    def status(self, cfg) -> dict:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def ask(self, cfg, action: str, wait: float = 30.0) -> tuple[int, dict]:
        self.asked.append(action)
        return 0, {"started": True}

    def check(self, d: dict) -> None:
        return None

    def said(self, d: dict) -> str:
        return f"{d.get('done')} samples"

    @staticmethod
    def started(d: dict) -> bool:
        return d != NEVER


def _run(tmp_path, replies, max_resumes=3) -> tuple[str | None, Scripted, dict]:
    job = {"model": "m", "dataset": "d.jsonl", "out": str(tmp_path / "out")}
    conf = write_config(tmp_path / "hsx.toml", job=job, pipeline={"max_resumes": max_resumes})
    (tmp_path / "run").mkdir()
    p = Pipeline(str(tmp_path / "run"), conf, ["extract"])
    st = Scripted(replies)
    p.rec.update(phase="running", stage="extract")  # as its run() takes a stage
    end = p._stage(st)
    p.rec.write()  # the record as its writer keeps it (a reader would say this process is no supervisor)
    return end, st, record.KIND.load(str(tmp_path / "run")).d


def test_a_crashed_stage_is_resumed_while_it_makes_progress_and_each_resume_is_said(tmp_path):
    end, st, rec = _run(tmp_path, [NEVER, crashed(208), crashed(300), {"phase": "done", "done": 400}])
    assert end is None and st.asked == ["start", "resume", "resume"]
    assert rec["healed"] == [
        "extract crashed at 208 / 400 samples (52.0%), resumed 1 of 3",
        "extract crashed at 300 / 400 samples (75.0%), resumed 2 of 3",
    ]
    assert rec["resumes"] == {"extract": 2} and rec["handed"] == ["extract: 400 samples"]


@pytest.mark.parametrize(
    "replies,budget,why",
    [
        ([NEVER, crashed(208), crashed(300)], 1, "(resumed 1 of 1 times already)"),
        ([NEVER, crashed(208), crashed(208)], 3, "(again at 208 / 400 samples (52.0%), with no progress"),
        ([NEVER, crashed(208)], 0, "([pipeline] max_resumes = 0)"),
        ([NEVER, {"phase": "failed", "reason": "the patch is missing"}], 3, "failed: the patch is missing"),
    ],
    ids=["budget-spent", "no-progress", "no-budget", "failed-is-not-retried"],
)
def test_past_its_budget_without_progress_or_failed_the_stage_ends_the_pipeline(
    tmp_path, replies, budget, why
):
    end, st, rec = _run(tmp_path, replies, budget)
    assert end == "failed" and why in rec["reason"], rec["reason"]
    assert st.asked.count("start") == 1 and st.asked.count("resume") == len(rec.get("healed", []))
