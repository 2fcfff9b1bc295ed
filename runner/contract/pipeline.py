"""The pipeline as ``hsx-runner pipeline status --json`` prints it: its own record (which stage
runs, why it ended) and, read live beside it, each stage's phase. The stages are the kinds of job,
in the order the data flows; ``[pipeline] stages`` names a run of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import StatusError
from .fields import check, short
from .status import Phase, RunHead

ACTIONS = ("start", "status", "stop")  # hsx-runner pipeline ACTION; start again resumes
STAGES = ("regenerate", "extract", "train", "measure")
_OWN = (Phase.PREFLIGHT, Phase.RUNNING, Phase.DONE, Phase.FAILED, Phase.STOPPED)
PHASES = tuple(p.value for p in (*_OWN, Phase.CRASHED))
ACTIVE = tuple(p for p in PHASES if Phase(p).is_active())
WHERE = "pipeline record"


def check_stages(stages: object) -> str | None:
    """Why ``stages`` is not a run of STAGES in their order (None: it is)."""
    if not isinstance(stages, list) or not stages or not all(isinstance(s, str) for s in stages):
        return f"stages must be a non-empty list of {', '.join(STAGES)}"
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        return f"unknown stage {unknown[0]!r} (the stages: {', '.join(STAGES)})"
    first = STAGES.index(stages[0])
    if list(stages) != list(STAGES[first : first + len(stages)]):
        return f"stages must follow each other in order ({' → '.join(STAGES)}), got {' → '.join(stages)}"
    return None


@dataclass(frozen=True)
class PipelineRecord(RunHead):
    stage: str | None = None  # the stage under way, or the one it ended at
    stages: list = field(default_factory=list)  # the pipeline's, in order
    run_dir: str | None = None
    handed: list = field(default_factory=list)  # "stage: what its end handed on", one per stage ended done
    healed: list = field(
        default_factory=list
    )  # "extract crashed at …, resumed 1 of 3": this launch's resumes
    resumes: dict = field(default_factory=dict)  # stage: how often this launch resumed it after a crash

    @classmethod
    def from_dict(cls, d: Any) -> PipelineRecord:
        kw = cls.opened(d, WHERE, PHASES)
        for k in ("stages", "handed", "healed"):
            for i, v in enumerate(kw.get(k) or []):
                check(WHERE, f"{k}[{i}]", v, "str")
        for k, v in (kw.get("resumes") or {}).items():
            check(WHERE, f"resumes[{short(k)}]", v, "int")
        if kw.get("stage") is not None and kw["stage"] not in STAGES:
            raise StatusError(f"{WHERE} has unknown stage {short(kw['stage'])}")
        return cls(**kw)


def check_reply(d: Any) -> dict[str, Any]:
    """``pipeline status``'s reply, checked and kept as given: its record's fields as
    PipelineRecord reads them, ``phases`` (stage: phase) an object of strings, ``current`` (the
    stage under way's own status reply) an object or null. A StatusError says what is wrong."""
    PipelineRecord.from_dict(d)
    phases = d.get("phases", {})
    if not isinstance(phases, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in phases.items()
    ):
        raise StatusError("pipeline status reply's 'phases' is not an object of stage: phase")
    if d.get("current") is not None and not isinstance(d["current"], dict):
        raise StatusError("pipeline status reply's 'current' is not an object or null")
    return d


class PipelineStatus(dict):
    """``pipeline status``'s reply as the ops side keeps it: the dict as given, checked
    (``check_reply``) when read and again when read back from a saved copy."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self)

    @classmethod
    def from_dict(cls, d: Any) -> PipelineStatus:
        return cls(check_reply(d))
