"""The draft's measurement as ``hsx-runner measure status --json`` prints it, typed and checked,
and what its results file holds.

The box measures the target alone (setting ``"none"``), then with the draft at each speculative
setting, each on a fresh SGLang server (its lifetime averages never mix), with the same prompts.
Each request's line in ``results.jsonl`` is the evidence; every figure is computed from it, so a
resume after a kill -9 ends with the same figures. Accept length is SGLang's own: completion
tokens per verify step, the bonus token counted (``meta_info`` ``spec_verify_ct``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from .errors import StatusError
from .fields import check, plain, short
from .status import Phase, RunHead

ACTIONS = ("start", "resume", "stop", "status")
# Two tokens whose logprobs are this close can swap on attention numerics alone (bf16 carries 2-3
# significant digits; the same target with another attention kernel differs there too): an output
# that differs at such a token is a near-tie, named as such; any other difference is the draft's
# serving changing what the target says.
NEAR_TIE = 0.05  # hsx-runner measure ACTION
NONE = "none"  # the target alone
RESULTS = "results.jsonl"  # in the run dir: a line per request, whole, exactly once
_OWN = (Phase.PREFLIGHT, Phase.STARTING_SERVER, Phase.MEASURING, Phase.DONE, Phase.FAILED, Phase.STOPPED)
PHASES = tuple(p.value for p in (*_OWN, Phase.CRASHED))
ACTIVE = tuple(p for p in PHASES if Phase(p).is_active())
WHERE = "measurement record"


def parse_setting(text: object) -> tuple[int, int, int]:
    """``"STEPS/TOPK/DRAFT_TOKENS"`` (SGLang's ``--speculative-num-steps``, ``-eagle-topk``,
    ``-num-draft-tokens``) as three positive ints; ValueError naming what is wrong."""
    parts = str(text).split("/")
    try:
        steps, topk, tokens = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"a setting is STEPS/TOPK/DRAFT_TOKENS, three integers, got {text!r}") from None
    if min(steps, topk, tokens) < 1:
        raise ValueError(f"a setting's numbers are each at least 1, got {text!r}")
    if topk == 1 and tokens != steps + 1:
        raise ValueError(f"a chain (TOPK 1) verifies STEPS + 1 tokens: {steps}/1/{steps + 1}, got {text!r}")
    return steps, topk, tokens


@dataclass(frozen=True)
class SettingFigures:
    """One setting's figures, from its lines in the results file."""

    setting: str
    requests: int = 0
    completion_tokens: int = 0
    verify_ct: int | None = None  # None for the target alone
    accept_length: float | None = None  # completion tokens / verify steps (SGLang's units)
    accept_rate: float | None = None  # correct drafts / proposed drafts
    histogram: list | None = None  # verify steps that accepted 0, 1, 2 ... drafts
    tokens_per_s: float | None = None  # completion tokens / the requests' summed latency
    ttft_s: float | None = None  # median time to the first token, where SGLang says it
    speedup: float | None = None  # tokens_per_s over the target alone's
    same: int | None = None  # requests whose output equals the target alone's
    differ: list | None = (
        None  # outputs unlike the target alone's: [prompt, first differing position, margin]
    )
    # margin: the target alone's top-2 logprobs there, apart (None: not known); NEAR_TIE or less: a near-tie


@dataclass(frozen=True)
class MeasureRecord(RunHead):
    done: int = 0  # requests in the results file, every setting
    total: int = 0  # prompts x settings (the target alone included)
    setting: str | None = None  # the one being measured
    server_activity: str | None = None  # what its log says (loading weights, ready)
    server_since: str | None = None  # when the server now up or loading was started
    restarts: int = 0
    last_death: str | None = None  # why the server last died (which rank, from its log)
    run_dir: str | None = None
    results: str | None = None
    export_dir: str | None = None  # the draft measured
    accept_length: float | None = None  # the best speculative setting's, measured
    best: str | None = None  # that setting
    simulated: float | None = None  # the training's simulated accept length at export, SGLang's units
    serve_command: str | None = None  # the best setting's server, as it was run
    settings: list = field(default_factory=list)  # SettingFigures as dicts, the target alone first
    failed: int = 0  # requests that failed on their own (refused by the server, or beside it alive)
    last_error: str | None = None  # "request 3 at 3/1/4: the server refused it: ..."
    passed_over: int = 0  # the dataset's rows the plan passed over (not JSON, no prompt, too long)
    passed_over_first: str | None = None  # "row 7: its prompt is 9,000 tokens: ..."
    reference: str | None = None  # [measure] reference: the target whose published figures follow
    # its figures at these settings (runner/measure/published.py)
    published: list = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Any) -> MeasureRecord:
        kw = cls.opened(d, WHERE, PHASES, ("server_since",), skip=("settings", "published"))
        for key in ("settings", "published"):
            check(WHERE, key, d.get(key) or [], "list")
        kw["settings"] = [figures_of(s, i) for i, s in enumerate(d.get("settings") or [])]
        kw["published"] = [published_of(p, i) for i, p in enumerate(d.get("published") or [])]
        return cls(**kw)


@dataclass(frozen=True)
class Published:
    """A published figure at one of this run's settings (runner/assets/published.json)."""

    benchmark: str
    setting: str
    batch: int
    accept_length: float
    speedup: float | None = None  # output tokens/s over the target alone's, as published
    draft: str = ""  # the draft they measured
    source: str = ""  # who published it ("SpecForge's SpecBundle")


def published_of(d: Any, i: int) -> dict[str, Any]:
    where = f"{WHERE} published {i}"
    if not isinstance(d, dict):
        raise StatusError(f"{where} is not a JSON object")
    return plain(Published, d, where)


def figures_of(d: Any, i: int) -> dict[str, Any]:
    where = f"{WHERE} setting {i}"
    if not isinstance(d, dict):
        raise StatusError(f"{where} is not a JSON object")
    kw = plain(SettingFigures, d, where)
    for k in ("accept_length", "accept_rate", "tokens_per_s", "speedup", "ttft_s"):
        v = kw.get(k)
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise StatusError(f"{where} field {k!r} is not a finite number >= 0 (got {short(v)})")
    return dataclasses.asdict(SettingFigures(**{"setting": "?", **kw}))
