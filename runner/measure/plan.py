"""The prompts, fixed at the start in the run dir (prompts.json), so that a resume measures the
very same ones: each row's turns up to its first assistant turn, rendered with the target's chat
template and its generation prompt, as token ids (the target then writes its own answer).

The rows are the training's held-out ones when its eval split holds some (``[train]
eval_samples``): the draft never trained on them, so its acceptance there is the one a new
prompt gets; else the dataset's first rows, or ``[measure] prompts``'s."""

from __future__ import annotations

import json
import os

from ..contract.atomic import read_object, write_atomic
from ..contract.config import Config
from ..contract.errors import ConfigError
from ..data import masks
from ..data.dataset import ROLE_ALIASES, RowError, load_tokenizer, parse_row
from ..output.store import FILE_RE
from ..train import runspec, split

NAME = "prompts.json"
LISTED = 100  # the rows passed over that the plan names, each with its reason; the rest are counted


def user_turns(row: dict) -> list[dict] | None:
    """The turns before the first assistant turn (system and user), or None for a row with no
    user turn there or of another shape."""
    turns = row.get("conversations", row.get("messages"))
    if not isinstance(turns, list):
        return None
    out = []
    for t in turns:
        if not isinstance(t, dict):
            return None
        said = t.get("role", t.get("from"))
        role = ROLE_ALIASES.get(said) if isinstance(said, str) else None
        content = t.get("content", t.get("value"))
        if role == "assistant":
            break
        if role is None or not isinstance(content, str):
            return None
        out.append({"role": role, "content": content})
    return out if any(m["role"] == "user" for m in out) else None


def held_out(cfg: Config) -> set[int] | None:
    """The dataset rows the training's eval split held out (its split.json), or None."""
    d = read_object(os.path.join(runspec.run_dir(cfg), split.NAME))
    held = d.get("eval") if d else None
    if not isinstance(held, list):
        return None
    rows = {
        int(m.group(1))
        for rel in held
        if isinstance(rel, str) and (m := FILE_RE.search(os.path.basename(rel)))
    }
    return rows or None


def _prompt(cfg: Config, tok, line: bytes) -> list[int]:
    """A row's prompt as token ids; RowError, with the reason, for a row that cannot be one: over
    ``[job] max_row_bytes``, not JSON, no user turn, a chat template that fails, or a prompt that
    leaves no room for ``[measure] max_new_tokens`` within ``[job] max_length`` (the server would
    refuse it at every resume, and the run with it)."""
    if len(line) > cfg.job.max_row_bytes:
        raise RowError(
            f"row is {len(line)} bytes, over the {cfg.job.max_row_bytes}-byte row limit ([job] max_row_bytes)"
        )
    msgs = user_turns(parse_row(line))
    if msgs is None:
        raise RowError("no user turn before its first answer")
    try:
        text = masks.render(tok, msgs, generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - a template's failure is the row's (role order, say)
        raise RowError(f"chat template failed: {str(e)[:300]}") from None
    ids = tok(text, add_special_tokens=False)["input_ids"]
    room = cfg.job.max_length - cfg.measure.max_new_tokens
    if len(ids) > room:
        raise RowError(
            f"its prompt is {len(ids)} tokens: with [measure] max_new_tokens "
            f"{cfg.measure.max_new_tokens}, past [job] max_length {cfg.job.max_length}"
        )
    return ids


def make(cfg: Config) -> dict:
    """The plan from the dataset (or ``[measure] prompts``): the first ``samples`` usable rows, of
    the held-out ones where the training holds some out; each row passed over is counted, the
    first ``LISTED`` named with their reasons."""
    path = cfg.measure.prompts or cfg.job.dataset
    only = None if cfg.measure.prompts else held_out(cfg)
    tok = load_tokenizer(cfg.job.tokenizer or cfg.job.model, cfg.job.trust_remote_code)
    prompts, skipped, passed = [], 0, []
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        raise ConfigError(f"[measure] prompts: cannot read {path} ({e})") from None
    with f:
        for i, line in enumerate(f):
            if len(prompts) >= cfg.measure.samples:
                break
            if only is not None and i not in only:
                continue
            try:
                prompts.append({"row": i, "input_ids": _prompt(cfg, tok, line)})
            except RowError as e:
                skipped += 1
                passed += [{"row": i, "reason": str(e)}] if len(passed) < LISTED else []
    if not prompts:
        first = f" (the first passed over, row {passed[0]['row']}: {passed[0]['reason']})" if passed else ""
        raise ConfigError(f"[measure] prompts: no row of {path} has a prompt to measure with{first}")
    rows = "the training's held-out rows" if only is not None else "its first rows"
    return {"source": os.path.abspath(path), "rows": rows, "skipped": skipped, "passed_over": passed,
            "prompts": prompts}  # fmt: skip


def load_or_make(root: str, cfg: Config) -> dict:
    path = os.path.join(root, NAME)
    plan = read_object(path)
    if plan is None or not isinstance(plan.get("prompts"), list):
        plan = make(cfg)
        write_atomic(path, json.dumps(plan) + "\n", 0o644)
    return plan
