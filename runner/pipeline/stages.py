"""The pipeline's stages as data: each is a kind of job (runner.kinds answers its actions in this
process, with the engines, locks and refusals each has), and what its done record must say
before the next stage starts."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .. import kinds
from ..contract.config import Config
from ..contract.status import HANDOFF_PENDING, NOT_STARTED
from ..contract.train import ACC_WINDOW

WAIT = "wait"  # a done stage still handing on (the extraction's verify): asked again


def _regenerated(d: dict) -> str | None:
    if not d.get("output") or not os.path.isfile(d["output"]):
        return f"its output {d.get('output')} is missing"
    if d.get("failed", 0) >= d.get("total", 0):
        return "no row was regenerated (see its failures file)"
    return None


def _extracted(d: dict) -> str | None:
    handoff = d.get("handoff")
    if handoff == HANDOFF_PENDING:
        return WAIT  # its runner verifies the features for training
    if handoff and "not verified" in handoff:
        return handoff
    return None


def _trained(d: dict) -> str | None:
    if d.get("export") == "pending":
        return WAIT
    if d.get("export_ok") is False:
        return f"its export failed: {d.get('export')}"
    return None


def _measured(d: dict) -> str:
    got = d.get("accept_length")
    if not isinstance(got, (int, float)):
        return "the draft measured (no speculative setting answered)"
    return f"measured accept length {got:.2f} at {d.get('best')} (SGLang's units)"


@dataclass(frozen=True)
class Stage:
    name: str  # its kind (runner.kinds)
    check: Callable[[dict], str | None]  # a done record: why not to go on (WAIT: not yet), None: go on
    said: Callable[[dict], str]  # what its end hands on, in a few words

    def ask(self, cfg: Config, action: str, wait: float = 30.0) -> tuple[int, dict]:
        return kinds.call(self.name, cfg, action, wait)

    def status(self, cfg: Config) -> dict:
        code, d = self.ask(cfg, "status")
        if code or "phase" not in d:
            return {"phase": "failed", "reason": d.get("reason") or f"its status answered exit code {code}"}
        return d

    @staticmethod
    def started(d: dict) -> bool:
        return not (d.get("phase") == "stopped" and d.get("reason") == NOT_STARTED)


def _regenerated_said(d: dict) -> str:
    """The hand-off's words: the rows written again, those cut at their token limit among them."""
    cut = f" ({d['cut']:,} with an answer cut at the token limit)" if d.get("cut") else ""
    return f"{d.get('total', 0) - d.get('failed', 0):,} rows regenerated{cut} into {d.get('output')}"


def _trained_said(d: dict) -> str:
    """The hand-off's words: the draft's top-1 acc where it started and ended (whether it
    learned), and where it was exported."""
    start, end = d.get("acc_start"), d.get("acc_mean")
    acc = (f" (draft top-1 acc {100 * start:.1f}% over its first {ACC_WINDOW} steps, {100 * end:.1f}% "
           f"at the end)" if isinstance(start, float) and isinstance(end, float) else "")  # fmt: skip
    return f"the draft trained{acc} and exported to {d.get('export_dir')}"


STAGES = {
    "regenerate": Stage("regenerate", _regenerated, _regenerated_said),
    "extract": Stage("extract", _extracted, lambda d: f"{d.get('done', 0):,} samples extracted and verified"),
    "train": Stage("train", _trained, _trained_said),
    "measure": Stage("measure", lambda d: None, _measured),
}  # fmt: skip
