"""The pipeline's stages as data: each is a kind of job asked through its own ``hsx-runner`` verbs
(in this process, the CLI's own main, handed in by its caller: the engines, locks and refusals
each verb has), and what its done record must say before the next stage starts."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from ..contract.status import HANDOFF_PENDING, NOT_STARTED
from ..contract.train import ACC_WINDOW

WAIT = "wait"  # a done stage still handing on (the extraction's verify): asked again


Main = Callable[[list[str]], int]  # runner.cli.main


def ask(main: Main, config: str, *argv: str) -> tuple[int, dict]:
    """``hsx-runner ARGV --json --config CONFIG``, answered in this process by ``main``."""
    # files, not StringIO: a verb's child writes to them by fd (a first train start builds the
    # trainer's venv with pip's output on stderr; a StringIO has no fileno, and the stage failed)
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        with contextlib.redirect_stdout(out_f), contextlib.redirect_stderr(err_f):
            code = main([*argv, "--json", "--config", config])
        out, err = (_read(f) for f in (out_f, err_f))
    try:
        reply = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        reply = {}
    if not isinstance(reply, dict):
        reply = {}
    if code and not reply.get("reason"):
        reply["reason"] = (err.strip() or out.strip())[-500:] or f"exit code {code}"
    return code, reply


def _read(f) -> str:
    f.flush()
    f.seek(0)
    return f.read()


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
    name: str
    verb: tuple[str, ...]  # hsx-runner VERB... ACTION; () for the extraction's own verbs
    check: Callable[[dict], str | None]  # a done record: why not to go on (WAIT: not yet), None: go on
    said: Callable[[dict], str]  # what its end hands on, in a few words

    def argv(self, action: str) -> list[str]:
        return [*self.verb, action]

    def status(self, main: Main, config: str) -> dict:
        code, d = ask(main, config, *self.argv("status"))
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
    "regenerate": Stage("regenerate", ("regenerate",), _regenerated, lambda d: _regenerated_said(d)),
    "extract": Stage("extract", (), _extracted, lambda d: f"{d.get('done', 0):,} samples extracted and verified"),
    "train": Stage("train", ("train",), _trained, lambda d: _trained_said(d)),
    "measure": Stage("measure", ("measure",), lambda d: None, lambda d: _measured(d)),
}  # fmt: skip
