"""The JSONL input: one sample per line, index = line number (0-based).

A row is a conversation (``conversations`` with role/content, or ShareGPT's from/value),
rendered with the tokenizer's chat template and masked as SpecForge masks it (runner/data/masks.py), or
pre-tokenized (``input_ids`` and optional ``loss_mask``). Rows longer than ``max_length``
are truncated; unusable rows raise ``RowError`` with a reason and never stop the job.
"""

from __future__ import annotations

import json
import mmap
import os
import threading
from array import array
from dataclasses import dataclass

from ..contract.errors import HsxError
from . import masks

ROLE_ALIASES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "system": "system",
}


REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")


MAX_ROW_BYTES = 4 << 20  # [job] max_row_bytes' default


class RowError(HsxError, ValueError):
    """This row cannot be used; the message is the reason recorded in failed.jsonl."""


def _no_constant(name: str):
    raise RowError(f"bad JSON: {name} is not a JSON number")


def parse_row(line: bytes) -> dict:
    """One JSON object, or RowError: bad JSON, ``NaN`` or ``Infinity`` (Python's json reads them,
    nothing downstream can write them back), a string with a lone surrogate (``"\\udc80"``: not
    text, it cannot be encoded, committed or tokenized), an integer past Python's 4,300 digits
    (ValueError) and nesting past the recursion limit are all the row's reason. The one parser
    of a dataset's rows: the extraction's, the regeneration's and the measurement's."""
    try:
        row = json.loads(line, parse_constant=_no_constant)
    except RecursionError:
        raise RowError("bad JSON: nested too deeply") from None
    except RowError:
        raise
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, the integer digit limit
        raise RowError(f"bad JSON: {e}") from None
    if not isinstance(row, dict):
        raise RowError("row is not a JSON object")
    if (
        b"\\u" if isinstance(line, bytes) else "\\u"
    ) in line:  # only an escape can make a lone surrogate: a row without one is whole text
        try:
            json.dumps(row, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            bad = e.object[e.start : e.end].encode("unicode_escape").decode()
            raise RowError(f"a string holds a lone surrogate ({bad}): not text") from None
    return row


@dataclass
class Sample:
    idx: int
    input_ids: list[int]
    loss_mask: list[int]
    truncated: bool = False


def line_offsets(path: str) -> array:
    """Byte offset of every line start (and the end), so rows are read on demand."""
    offsets = array("q", [0])
    size = os.path.getsize(path)
    if size == 0:
        return offsets
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = m.find(b"\n")
        while pos != -1:
            offsets.append(pos + 1)
            pos = m.find(b"\n", pos + 1)
    if offsets[-1] != size:  # last line without a newline
        offsets.append(size)
    return offsets


class TokenizerLoader:
    """The tokenizer, loaded on first use: a dataset of pre-tokenized rows never needs it."""

    def __init__(self, path: str, trust_remote_code: bool = False):
        self.path, self.trust_remote_code = path, trust_remote_code
        self._tok = None
        self._lock = threading.Lock()

    def get(self):
        with self._lock:
            if self._tok is None:
                self._tok = load_tokenizer(self.path, self.trust_remote_code)
            return self._tok


class Dataset:
    def __init__(
        self,
        path: str,
        tokenizer,
        max_length: int,
        vocab_size: int | None = None,
        max_row_bytes: int = MAX_ROW_BYTES,
    ):
        """``tokenizer``: a tokenizer or a TokenizerLoader; ``vocab_size``: ids a row may use
        (the model's; by default the tokenizer's length); a row past ``max_row_bytes`` fails unread."""
        self.path = path
        self._tok = tokenizer
        self.max_length = max_length
        self.max_row_bytes = max_row_bytes
        self.vocab_size = vocab_size if vocab_size is not None else len(self.tokenizer)
        self._offsets = line_offsets(path)
        self._f = open(path, "rb")  # noqa: SIM115 - held for the dataset's life
        self._marks: masks.Markers | None | bool = False  # False: not read yet

    @property
    def tokenizer(self):
        return self._tok.get() if isinstance(self._tok, TokenizerLoader) else self._tok

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def row_bytes(self, idx: int) -> int:
        return self._offsets[idx + 1] - self._offsets[idx]

    def raw(self, idx: int) -> bytes:
        """The row's bytes; RowError, unread, past the byte cap."""
        size = self.row_bytes(idx)
        if size > self.max_row_bytes:
            raise RowError(
                f"row is {size} bytes, over the {self.max_row_bytes}-byte row limit ([job] max_row_bytes)"
            )
        self._f.seek(self._offsets[idx])
        return self._f.read(size)

    def get(self, idx: int) -> Sample:
        """The row as a Sample, or RowError with the reason: whatever is wrong with a row
        (its JSON, its size, its shape) fails that row, never the caller."""
        line = self.raw(idx).strip()
        if not line:
            raise RowError("empty line")
        row = parse_row(line)
        if "conversations" in row:
            self.tokenizer  # noqa: B018 - a tokenizer that cannot load is the job's fault, not the row's
        try:
            return self._sample(idx, row)
        except RowError:
            raise
        except RecursionError:
            raise RowError("row nested too deeply") from None
        except Exception as e:  # noqa: BLE001 - anything else a row's content trips is that row's reason
            raise RowError(f"unusable row: {type(e).__name__}: {e}") from None

    def _sample(self, idx: int, row: dict) -> Sample:
        if "input_ids" in row:
            ids, mask = self._pretokenized(row)
        elif "conversations" in row:
            ids, mask = self._conversation(row["conversations"])
        else:
            raise RowError("row has neither 'conversations' nor 'input_ids'")
        if len(ids) < 1:
            raise RowError("row has no tokens")
        truncated = len(ids) > self.max_length
        if truncated:
            ids, mask = ids[: self.max_length], mask[: self.max_length]
        return Sample(idx, ids, mask, truncated)

    def _pretokenized(self, row: dict) -> tuple[list[int], list[int]]:
        ids = row["input_ids"]
        if not isinstance(ids, list) or not all(type(t) is int for t in ids):
            raise RowError("input_ids must be a list of integers")
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise RowError(f"token id {bad} outside the vocabulary (0..{self.vocab_size - 1})")
        mask = row.get("loss_mask", [1] * len(ids))
        if not isinstance(mask, list) or len(mask) != len(ids) or not all(m in (0, 1) for m in mask):
            raise RowError("loss_mask must be a list of 0/1 as long as input_ids")
        return ids, [int(m) for m in mask]

    def _conversation(self, turns) -> tuple[list[int], list[int]]:
        if not isinstance(turns, list) or not turns:
            raise RowError("conversations must be a non-empty list")
        messages = []
        for t in turns:
            if not isinstance(t, dict):
                raise RowError("each conversation turn must be an object")
            role = t.get("role", t.get("from"))
            content = t.get("content", t.get("value"))
            if role not in ROLE_ALIASES or not isinstance(content, str):
                raise RowError(f"bad turn (role {role!r}); need role/content or from/value")
            msg = {"role": ROLE_ALIASES[role], "content": content}
            reasoning = next((t[k] for k in REASONING_KEYS if isinstance(t.get(k), str)), None)
            if reasoning is not None and msg["role"] == "assistant":  # Qwen3/Kimi and gpt-oss names
                msg["reasoning_content"] = msg["thinking"] = reasoning
            messages.append(msg)
        tok = self.tokenizer
        try:
            text = masks.render(tok, messages)
        except Exception as e:  # template errors are the row's fault (e.g. role order)
            raise RowError(f"chat template failed: {e}") from None
        marks = self._markers(tok)
        try:
            spans = marks.spans(text) if marks else masks.content_spans(text, messages)
        except ValueError as e:
            raise RowError(str(e)) from None
        if getattr(tok, "is_fast", False):
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            return list(enc["input_ids"]), masks.offsets_mask(enc["offset_mapping"], spans)
        ids = list(tok.encode(text, add_special_tokens=False))
        return ids, masks.prefix_mask(tok, text, len(ids), spans)

    def _markers(self, tok) -> masks.Markers | None:
        """The template's assistant markers, read once; None: it has no generation prompt."""
        if self._marks is False:
            try:
                self._marks = masks.markers(tok)
            except masks.TemplateError:
                self._marks = None
        return self._marks

    def check_tokenizer(self) -> None:
        """Load the tokenizer now if the first row needs one, so a tokenizer that cannot load
        fails the job before a server is started for it (pre-tokenized rows never load it)."""
        for idx in range(min(len(self), 16)):
            if self.row_bytes(idx) > self.max_row_bytes:
                continue  # fails as a row; never read whole here
            line = self.raw(idx).strip()
            if line:
                if b'"conversations"' in line:
                    self.tokenizer  # noqa: B018 - loads it
                return

    def close(self) -> None:
        self._f.close()


def load_tokenizer(path: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)


def open_dataset(job, vocab_size: int | None) -> Dataset:
    """The job's dataset; its tokenizer is loaded only if a conversation row needs it."""
    loader = TokenizerLoader(job.tokenizer, job.trust_remote_code)
    return Dataset(job.dataset, loader, job.max_length, vocab_size, job.max_row_bytes)
