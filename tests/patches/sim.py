"""Batches built the way SGLang builds them, from a real (tiny) transformers model.

A request's prefill may run in chunks (each chunk a forward that continues the request's
KV cache, like SGLang's extend); a batch holds pieces of several requests, and its rows are
the pieces' rows concatenated in request order. ``run_batch`` then walks the batch exactly as
SGLang 0.5.23's ``process_batch_result_prefill`` does around the hidden-state hook.
"""

from __future__ import annotations

import inspect
from array import array
from types import SimpleNamespace

import torch

AUX_IDS = [1, 3, 5]


def tiny_model(seed: int = 0, layers: int = 8, hidden: int = 64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=96, hidden_size=hidden, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


def reference(model, ids: list[int], aux_ids=AUX_IDS):
    """One full forward of the request: (final-norm [n, H], aux concat [n, 3H])."""
    with torch.inference_mode():
        out = model.model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    aux = torch.cat([out.hidden_states[i + 1][0] for i in aux_ids], dim=-1)
    return out.last_hidden_state[0].clone(), aux.clone()


class ChunkedForward:
    """Continues one request's KV cache chunk by chunk, returning each chunk's rows."""

    def __init__(self, model, aux_ids=AUX_IDS):
        from transformers import DynamicCache

        self.model, self.aux_ids, self.cache = model, aux_ids, DynamicCache()
        params = inspect.signature(model.model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x

    def __call__(self, tokens: list[int]):
        with torch.inference_mode():
            out = self.model.model(
                input_ids=torch.tensor([tokens]),
                use_cache=True,
                output_hidden_states=True,
                **{self.cache_kw: self.cache},
            )
        aux = torch.cat([out.hidden_states[i + 1][0] for i in self.aux_ids], dim=-1)
        return out.last_hidden_state[0].clone(), aux.clone()


def make_req(rid: str, ids: list[int], mask_text: str | None, marked: bool = True):
    custom = {"hsx_dump": True, "hsx_loss_mask": mask_text} if marked else None
    req = SimpleNamespace(
        rid=rid, origin_input_ids=array("q", ids), sampling_params=SimpleNamespace(custom_params=custom),
        return_hidden_states=True, hidden_states=[], inflight_middle_chunks=0, is_retracted=False,
        retraction_count=0, aborted=False,
    )  # fmt: skip
    req.finished = lambda: req.aborted
    return req


FULL = SimpleNamespace(is_full=lambda: True, is_last=lambda: False)


def stock_append(
    self, *, req, logits_output, hidden_state_offset, capture_hidden_mode, extend_input_len, store=True
):
    """SGLang 0.5.23's full-mode stock path (JSON lists into req.hidden_states)."""
    start = hidden_state_offset
    hidden_state_offset += extend_input_len
    if store and req.return_hidden_states:
        req.hidden_states.append(logits_output.hidden_states[start:hidden_state_offset].clone().tolist())
    return hidden_state_offset


def run_batch(append, stream, pieces, forwards):
    """``pieces``: [(req, start, end)] in batch order. Computes the rows, then walks the batch
    like process_batch_result_prefill: hook per request, then stream_output."""
    finals, auxes, lens = [], [], []
    for req, start, end in pieces:
        final, aux = forwards[req.rid](list(req.origin_input_ids[start:end]))
        finals.append(final)
        auxes.append(aux)
        lens.append(end - start)
        if end < len(req.origin_input_ids):
            req.inflight_middle_chunks += 1  # the scheduler counts a scheduled middle chunk
    lo = SimpleNamespace(hidden_states=torch.cat(auxes), last_hidden_states=torch.cat(finals))
    offset = 0
    reqs = [p[0] for p in pieces]
    for req, n in zip(reqs, lens, strict=True):
        store = not req.finished() and not req.is_retracted and req.inflight_middle_chunks <= 0
        offset = append(
            None, req=req, logits_output=lo, hidden_state_offset=offset,
            capture_hidden_mode=FULL, extend_input_len=n, store=store,
        )  # fmt: skip
        if req.inflight_middle_chunks > 0:
            req.inflight_middle_chunks -= 1
    stream(None, reqs, False, None)
    return offset, lo
