"""One input row regenerated: its turns read in its own spelling (role/content or ShareGPT's
from/value), each assistant turn to be written again by the target in order, and the row rebuilt
in that spelling with every other key kept. A row whose last turn is a user's gets the target's
answer as a new assistant turn. Whatever is wrong with a row is a RowError with its reason."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from ..data.dataset import REASONING_KEYS, ROLE_ALIASES, RowError

THINK_END = "</think>"
_THINK = re.compile(r"\A\s*(?:<think>)?.*?</think>\s*", re.S)


@dataclass
class Turns:
    row: dict
    key: str  # "conversations" or "messages"
    content_key: str  # "content" or "value"
    role_key: str  # "role" or "from"
    messages: list[dict]  # normalised: {"role", "content"}, the assistant contents to be replaced
    answers: list[int]  # indices into messages of the assistant turns to write
    appended: bool  # the last turn was a user's: an assistant turn is added


def read(row: dict) -> Turns:
    key = "conversations" if "conversations" in row else "messages" if "messages" in row else None
    turns = row.get(key) if key else None
    if not isinstance(turns, list) or not turns:
        raise RowError("no conversation: a row needs a non-empty conversations (or messages) list")
    msgs, answers = [], []
    spelled = None
    for t in turns:
        if not isinstance(t, dict):
            raise RowError("each conversation turn must be an object")
        role_key, content_key = ("role", "content") if "role" in t else ("from", "value")
        spelled = spelled or (role_key, content_key)
        said, content = t.get(role_key), t.get(content_key)
        role = ROLE_ALIASES.get(said) if isinstance(said, str) else None
        if role is None or not isinstance(content, str):
            raise RowError(f"bad turn (role {said!r}); need role/content or from/value")
        if role == "assistant":
            if not any(m["role"] == "user" for m in msgs):
                raise RowError("an assistant turn before any user turn: nothing to answer")
            answers.append(len(msgs))
        msgs.append({"role": role, "content": content})
    appended = msgs[-1]["role"] == "user"
    if appended:
        answers.append(len(msgs))
    if not answers:
        raise RowError("no user turn to answer")
    role_key, content_key = spelled
    return Turns(row, key, content_key, role_key, msgs, answers, appended)


def reasoning(text: str, how: str) -> str:
    """The thinking kept, or cut out ("drop": everything up to the first ``</think>``)."""
    if how == "drop" and THINK_END in text:
        return _THINK.sub("", text, count=1)
    return text


def rebuild(t: Turns, written: list[str]) -> dict:
    """The row with its assistant turns' content replaced by ``written`` (in order), in its own
    spelling; every other key of the row and of each turn kept."""
    row = copy.deepcopy(t.row)
    turns = row[t.key]
    n = len(t.answers) - (1 if t.appended else 0)
    for i, text in zip(t.answers[:n], written, strict=False):
        turns[i][t.content_key] = text
        for k in REASONING_KEYS:  # another writer's thinking: not the target's
            turns[i].pop(k, None)
    if t.appended:
        spoken = "assistant" if t.role_key == "role" else "gpt"
        turns.append({t.role_key: spoken, t.content_key: written[-1]})
    return row
