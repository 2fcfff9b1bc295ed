"""hsx's Kimi-shaped tokenizer fixture: a tiktoken BPE (``tiktoken.model``) behind a slow
transformers tokenizer, loaded through ``auto_map`` with trust_remote_code, like Kimi's own.
Special tokens take the ids after the BPE ranks, named by ``added_tokens_decoder``."""

from __future__ import annotations

import os

import tiktoken
from tiktoken.load import load_tiktoken_bpe
from transformers import PreTrainedTokenizer

RESERVED = 256
PAT_STR = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


def _byte_chars() -> dict[int, str]:
    """Each byte as a printable character, so a token is a str (GPT-2's byte-level map)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


class TikTokenTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "tiktoken.model"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, added_tokens_decoder=None, **kwargs):
        ranks = load_tiktoken_bpe(vocab_file)
        base = len(ranks)
        names = {
            int(i): (t.content if hasattr(t, "content") else t["content"])
            for i, t in (added_tokens_decoder or {}).items()
        }
        self.special = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(base, base + RESERVED)}
        self.model = tiktoken.Encoding(
            name=os.path.basename(vocab_file),
            pat_str=PAT_STR,
            mergeable_ranks=ranks,
            special_tokens=self.special,
        )
        self.vocab_file = vocab_file
        self._bytes = _byte_chars()
        self._unbytes = {c: b for b, c in self._bytes.items()}
        self.encoder = {"".join(self._bytes[b] for b in tok): i for tok, i in ranks.items()}
        self.encoder.update(self.special)
        self.decoder = {i: t for t, i in self.encoder.items()}
        super().__init__(added_tokens_decoder=added_tokens_decoder, **kwargs)

    @property
    def vocab_size(self) -> int:
        return self.model.n_vocab

    def get_vocab(self) -> dict[str, int]:
        return dict(self.encoder)

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return [self.decoder[i] for i in self.model.encode(text, allowed_special="all")]

    def _convert_token_to_id(self, token: str) -> int:
        return self.encoder[token]

    def _convert_id_to_token(self, index: int) -> str:
        return self.decoder[index]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        out = bytearray()
        for t in tokens:
            if t in self.special:
                out += t.encode()
            else:
                out += bytes(self._unbytes[c] for c in t)
        return out.decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None):
        import shutil

        dest = os.path.join(save_directory, (filename_prefix or "") + "tiktoken.model")
        if os.path.abspath(dest) != os.path.abspath(self.vocab_file):
            shutil.copyfile(self.vocab_file, dest)
        return (dest,)
