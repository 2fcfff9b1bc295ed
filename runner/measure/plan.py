"""The prompts, fixed at the start in the run dir (prompts.json), so that a resume measures the
very same ones: each row's turns up to its first assistant turn, rendered with the target's chat
template and its generation prompt, as token ids (the target then writes its own answer)."""

from __future__ import annotations

import json
import os

from ..contract.atomic import read_object, write_atomic
from ..contract.config import Config
from ..contract.errors import ConfigError
from ..data import masks
from ..data.dataset import ROLE_ALIASES, RowError, load_tokenizer, parse_row

NAME = "prompts.json"


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


def make(cfg: Config) -> dict:
    """The plan from the dataset (or ``[measure] prompts``): the first ``samples`` usable rows."""
    path = cfg.measure.prompts or cfg.job.dataset
    tok = load_tokenizer(cfg.job.tokenizer or cfg.job.model, cfg.job.trust_remote_code)
    prompts, skipped = [], 0
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        raise ConfigError(f"[measure] prompts: cannot read {path} ({e})") from None
    with f:
        for i, line in enumerate(f):
            if len(prompts) >= cfg.measure.samples:
                break
            try:
                msgs = user_turns(parse_row(line))
            except RowError:
                msgs = None
            if msgs is None:
                skipped += 1
                continue
            text = masks.render(tok, msgs, generation_prompt=True)
            prompts.append({"row": i, "input_ids": tok(text, add_special_tokens=False)["input_ids"]})
    if not prompts:
        raise ConfigError(f"[measure] prompts: no row of {path} has a user turn to measure with")
    return {"source": os.path.abspath(path), "skipped": skipped, "prompts": prompts}


def load_or_make(root: str, cfg: Config) -> dict:
    path = os.path.join(root, NAME)
    plan = read_object(path)
    if plan is None or not isinstance(plan.get("prompts"), list):
        plan = make(cfg)
        write_atomic(path, json.dumps(plan) + "\n", 0o644)
    return plan
