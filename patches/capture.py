"""Capture logic of the dump patch, free of SGLang: slice one request's rows out of a batch,
reassemble chunked-prefill pieces, and check that a sample is complete before it is written.

SGLang's prefill result for a batch holds, under full capture, one row per forwarded token:
the requests of the batch in order, each contributing ``extend_input_len`` rows (its tokens
``[prefix, prefix + extend)``). ``hidden_states`` is the aux concat ``[rows, 3H]``,
``last_hidden_states`` the final-norm output ``[rows, H]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runner.contract import dump
from runner.contract.errors import HsxError


class RowMismatch(HsxError, ValueError):
    """The rows gathered for a request do not cover exactly its prompt."""


def is_marked(custom_params: object) -> bool:
    return isinstance(custom_params, dict) and custom_params.get(dump.CUSTOM_KEY) is True


def slice_rows(aux, final, offset: int, n: int):
    """Rows ``[offset, offset + n)`` of both tensors, as views."""
    if aux is None or final is None:
        raise RowMismatch("the batch has no aux or final-norm rows (is aux capture on?)")
    if n < 0 or offset < 0 or offset + n > aux.shape[0] or offset + n > final.shape[0]:
        raise RowMismatch(
            f"rows [{offset}, {offset + n}) outside the batch's {aux.shape[0]} aux / {final.shape[0]} final rows"
        )
    return aux[offset : offset + n], final[offset : offset + n]


@dataclass
class Sample:
    """One request's rows, handed from the scheduler thread to a writer thread. The scheduler
    only takes views; the writer waits for ``ready`` (a device-to-host copy still in flight),
    checks, decodes the mask and copies (``torch.cat``), off the scheduler's loop."""

    rid: str
    input_ids: list[int]
    mask_text: str
    aux_pieces: list = field(default_factory=list)
    final_pieces: list = field(default_factory=list)
    ready: object = None  # an event with .synchronize(), or None when the rows are on the host
    loss_mask: list[int] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(int(p.shape[0]) for p in self.final_pieces)

    def finish(self) -> None:
        """On the writer thread: wait for the rows, then check them against the prompt."""
        if self.ready is not None:
            self.ready.synchronize()
        self.loss_mask = dump.decode_mask(self.mask_text, len(self.input_ids))
        check_complete(self)

    def tensors(self) -> dict:
        """The output-format tensors; ``torch.cat`` copies, so no batch storage is kept."""
        import torch

        aux = torch.cat(self.aux_pieces, dim=0).unsqueeze(0)
        final = torch.cat(self.final_pieces, dim=0).unsqueeze(0)
        return {
            "input_ids": torch.tensor(self.input_ids, dtype=torch.int64),
            "loss_mask": torch.tensor(self.loss_mask, dtype=torch.int64),
            "hidden_state": final,
            "aux_hidden_state": aux,
        }


def check_complete(sample: Sample) -> None:
    """Raise RowMismatch unless the rows cover the prompt exactly, with 3 aux layers of width H."""
    n = len(sample.input_ids)
    if sample.rows != n or sum(int(p.shape[0]) for p in sample.aux_pieces) != n:
        raise RowMismatch(f"{sample.rid}: {sample.rows} rows gathered for {n} prompt tokens")
    h = int(sample.final_pieces[0].shape[-1])
    widths = {int(p.shape[-1]) for p in sample.aux_pieces}
    if widths != {3 * h}:
        raise RowMismatch(f"{sample.rid}: aux width {sorted(widths)} is not 3 x hidden size {h}")


class Reassembler:
    """Pieces of requests whose prefill runs in several chunks, keyed by (rid, retraction count).

    Only one request is chunked at a time in SGLang, so this holds at most a few entries;
    a key that comes back after a retraction starts clean.
    """

    def __init__(self):
        self._pieces: dict[tuple[str, int], tuple[list, list]] = {}

    def __len__(self) -> int:
        return len(self._pieces)

    def add(self, key: tuple[str, int], aux, final) -> None:
        for old in [k for k in self._pieces if k[0] == key[0] and k != key]:
            del self._pieces[old]
        a, f = self._pieces.setdefault(key, ([], []))
        a.append(aux)
        f.append(final)

    def take(self, key: tuple[str, int]) -> tuple[list, list]:
        return self._pieces.pop(key, ([], []))

    def drop(self, rid: str) -> bool:
        keys = [k for k in self._pieces if k[0] == rid]
        for k in keys:
            del self._pieces[k]
        return bool(keys)


def on_rows(
    buf: Reassembler,
    *,
    rid: str,
    retraction_count: int,
    input_ids,
    custom_params: dict,
    middle_chunk: bool,
    commit: bool,
    aux,
    final,
    ready=None,
) -> Sample | None:
    """Handle one request's rows from one prefill forward; return its Sample once complete.

    ``middle_chunk``: more chunks of this request follow; ``commit``: SGLang would keep this
    forward's output (false for aborted, retracted or discarded requests, which write nothing).
    Cheap on purpose (it runs on the scheduler's thread): views and bookkeeping only.
    Raises dump.DumpError for a request whose rid cannot name a file.
    """
    key = (rid, retraction_count)
    if middle_chunk:
        buf.add(key, aux, final)
        return None
    if not commit:
        buf.drop(rid)
        return None
    aux_pieces, final_pieces = buf.take(key)
    return Sample(
        rid=dump.check_rid(rid),
        input_ids=list(input_ids),
        mask_text=str(custom_params.get(dump.MASK_KEY, "")),
        aux_pieces=[*aux_pieces, aux],
        final_pieces=[*final_pieces, final],
        ready=ready,
    )
