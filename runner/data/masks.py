"""Loss masks for conversation rows, as SpecForge's own preprocessing makes them.

SpecForge renders the whole conversation with the tokenizer's chat template and trains on every
character from the end of an assistant header to the end of that turn's end-of-turn marker
(its GeneralParser and ThinkingParser: content, any reasoning the template renders, and the
end-of-turn token; never the header). For harmony templates (gpt-oss) its HarmonyParser trains
from the first ``<|start|>assistant`` of a run of assistant messages up to the next user
message. Characters become tokens by tokenizing growing prefixes of the rendered text, which
needs no offset mapping, so slow tokenizers (Kimi's tiktoken one) work; for fast tokenizers
``offsets_mask`` gives the same mask from the offset mapping.

The markers are read from the template itself, not from a table of families: the header is
the generation prompt, the end-of-turn is what follows an assistant reply's content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..contract.errors import HsxError

_MARK = "HSXMARK7F3A9"  # no whitespace: templates trim content
HARMONY_HEADER = "<|start|>assistant"
# Where SpecForge's registry starts the trained span before the end of the generation prompt:
# its Kimi templates (kimi-k2-thinking; kimi-k25-thinking in its Kimi-K2.5 pull request) train
# the <think> that Kimi's generation prompt opens.
SPECFORGE_HEADER = {"<|im_assistant|>assistant<|im_middle|><think>": "<|im_assistant|>assistant<|im_middle|>"}
_HARMONY_NEXT = re.compile(r"(?=<\|start\|>user<\|message\|>|$)")


class TemplateError(HsxError, ValueError):
    """The chat template gives no assistant header or end-of-turn we can find."""


@dataclass(frozen=True)
class Markers:
    header: str  # what opens an assistant turn (the generation prompt)
    end: str  # what closes it (trained on, like the content)
    harmony: bool = False

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans trained on, in order."""
        out, at = [], 0
        while True:
            start = text.find(self.header, at)
            if start < 0:
                return out
            start += len(self.header)
            if self.harmony:
                end = _HARMONY_NEXT.search(text, start).start()
            else:
                close = text.find(self.end, start) if self.end else -1
                end = len(text) if close < 0 else close + len(self.end)
            if end > start:
                out.append((start, end))
            at = max(end, start)


def content_spans(text: str, messages: list[dict]) -> list[tuple[int, int]]:
    """For a template with no generation prompt: each assistant content, found in order."""
    spans, cursor = [], 0
    for m in messages:
        at = text.find(m["content"], cursor)
        if at < 0:
            raise ValueError("message content not found in the rendered chat template")
        cursor = at + len(m["content"])
        if m["role"] == "assistant":
            spans.append((at, cursor))
    return spans


def render(tok, messages: list[dict], generation_prompt: bool = False) -> str:
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def markers(tok) -> Markers:
    """The assistant header and end-of-turn of this tokenizer's chat template."""
    user = [{"role": "user", "content": "hello"}]
    try:
        bare, prompted = render(tok, user), render(tok, user, True)
        reply = render(tok, [*user, {"role": "assistant", "content": _MARK}])
    except Exception as e:  # noqa: BLE001 - any template failure is the template's
        raise TemplateError(f"chat template failed on a plain conversation: {e}") from None
    if not prompted.startswith(bare) or len(prompted) == len(bare):
        raise TemplateError("chat template has no generation prompt (add_generation_prompt)")
    header = prompted[len(bare) :]
    header = SPECFORGE_HEADER.get(header, header)
    if _MARK not in reply:
        raise TemplateError("chat template drops the assistant's content")
    end = reply[reply.rindex(_MARK) + len(_MARK) :]
    return Markers(header, end, harmony=header.rstrip() == HARMONY_HEADER)


def prefix_mask(tok, text: str, n_tokens: int, spans: list[tuple[int, int]]) -> list[int]:
    """Token i is trained on when it lies in a span; a character offset becomes a token count
    by tokenizing the text up to it (SpecForge's method; works for any tokenizer)."""
    mask = [0] * n_tokens
    for s, e in spans:
        a = len(tok.encode(text[:s], add_special_tokens=False))
        b = len(tok.encode(text[:e], add_special_tokens=False))
        for i in range(min(a, n_tokens), min(b, n_tokens)):
            mask[i] = 1
    return mask


def offsets_mask(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """The same mask from a fast tokenizer's offsets: a token inside a span is trained on."""
    mask = [0] * len(offsets)
    j = 0
    for i, (s, e) in enumerate(offsets):
        while j < len(spans) and spans[j][1] <= s:
            j += 1
        if j < len(spans) and spans[j][0] <= s and e <= spans[j][1] and e > s:
            mask[i] = 1
    return mask
