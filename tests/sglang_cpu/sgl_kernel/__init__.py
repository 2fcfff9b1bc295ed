"""Test-only stand-in for SGLang's CPU kernel package, for the real-SGLang CPU lane.

PyPI's ``sgl-kernel`` is a CUDA build; the CPU build needs compiling. SGLang's CPU engine,
on the paths these tests drive (Llama on ``torch_native`` attention, DeepSeek-V3 MLA with
``intel_amx`` prefill, an EAGLE-3 draft on ``intel_amx`` prefill and decode), calls only the
ops below and in ``speculative.py``, written in plain torch. Every other name resolves to a
function that raises, naming the op: a new call is a clear failure, never a silently wrong
result.
"""

from __future__ import annotations

import torch

from .speculative import (  # noqa: F401  (the names SGLang imports from sgl_kernel)
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    build_draft_decode_metadata_cpu,
    build_tree_kernel_efficient_cpu,
    copy_all_layer_kv_cache_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    verify_tree_greedy_cpu,
)


class StandInMissing(NotImplementedError):
    pass


def _missing(name: str):
    def op(*args, **kwargs):
        raise StandInMissing(f"sgl_kernel.{name} is not in the hsx test stand-in (tests/sglang_cpu)")

    op.__name__ = name
    return op


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _missing(name)


def assign_req_to_token_pool_cpu(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len
):
    """Per request r (in batch order): req_to_token[pool[r], start:end] = its slice of out_cache_loc."""
    pos = 0
    for r in range(req_pool_indices.shape[0]):
        s, e = int(start_offset[r]), int(end_offset[r])
        n = e - s
        req_to_token[int(req_pool_indices[r]), s:e] = out_cache_loc[pos : pos + n].to(req_to_token.dtype)
        pos += n


def _attend(q, k, v, sm_scale, allowed):
    """Softmax attention of q [n, heads, d] over k, v [m, kv_heads, d] (GQA), in fp32, where
    ``allowed`` [n, m] says which key each query may see; returns [n, heads, dv]."""
    heads, kv_heads = q.shape[1], k.shape[1]
    qh = q.float().transpose(0, 1)  # [heads, n, d]
    kh = k.float().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
    vh = v.float().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
    scores = (qh @ kh.transpose(1, 2)) * sm_scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(0, 1)


def _unsupported(logit_cap, is_cross, window, sinks) -> None:
    if sinks is not None or is_cross or (logit_cap or 0) > 0 or (window is not None and window > 0):
        raise StandInMissing("sgl_kernel attention: sinks, cross attention, logit cap or sliding window")


def extend_attention_cpu(
    q, k, v, o, k_buffer, v_buffer, k_scale, v_scale, req_to_token, req_pool_indices, seq_lens,
    extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap, is_cross, window,
    encoder_lens, sinks, tree_mask, is_causal,
):  # fmt: skip
    """Each request's new queries over its cached prefix plus its new keys (GQA), written into
    ``o`` in place: causal, or, given ``tree_mask`` (the verify pass of a draft tree, the
    QLEN_ONLY layout: an ext x ext bool block per request, requests one after another), the
    prefix in full and, among the new keys, those the mask allows (a node, its ancestors and
    the root). The new keys are taken from ``k``/``v``, the prefix from the cache."""
    _unsupported(logit_cap, is_cross, window, sinks)
    if not is_causal:
        raise StandInMissing("extend_attention_cpu: non-causal attention")
    mask_at = 0
    for r in range(seq_lens.shape[0]):
        ext, start = int(extend_seq_lens[r]), int(extend_start_loc[r])
        prefix = int(seq_lens[r]) - ext
        kr, vr = k[start : start + ext], v[start : start + ext]
        if prefix > 0:
            if k_buffer.shape[1:] != k.shape[1:] or v_buffer.shape[1:] != v.shape[1:]:
                raise StandInMissing("extend_attention_cpu: a cached prefix in a latent (MLA) cache")
            loc = req_to_token[int(req_pool_indices[r]), :prefix].long()
            kr = torch.cat([k_buffer[loc].to(k.dtype) * (k_scale or 1.0), kr])
            vr = torch.cat([v_buffer[loc].to(v.dtype) * (v_scale or 1.0), vr])
        allowed = torch.ones(ext, prefix + ext, dtype=torch.bool).tril(diagonal=prefix)
        if tree_mask is not None:
            allowed[:, prefix:] = tree_mask.view(-1)[mask_at : mask_at + ext * ext].view(ext, ext)
            mask_at += ext * ext
        o[start : start + ext] = _attend(q[start : start + ext], kr, vr, sm_scale, allowed).to(o.dtype)


def decode_attention_cpu(
    q, k_buffer, v_buffer, k_scale, v_scale, o, key, value, loc, attn_logits, req_to_token,
    req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross, window, encoder_lens, sinks,
):  # fmt: skip
    """One new query per sequence: first the new ``key``/``value`` go into the cache at ``loc``
    (as the real kernel does: the backend leaves that write to it; None when already
    written), then query i attends over the first ``seq_lens[i]`` slots of its
    ``req_to_token`` row, which end with that new slot. Output into ``o`` in place;
    ``attn_logits`` is the kernel's split scratch, unused here."""
    _unsupported(logit_cap, is_cross, window, sinks)
    if key is not None and value is not None:
        at = loc.long()
        k_buffer[at] = key.reshape(-1, *k_buffer.shape[1:]).to(k_buffer.dtype)
        v_buffer[at] = value.reshape(-1, *v_buffer.shape[1:]).to(v_buffer.dtype)
    for i in range(seq_lens.shape[0]):
        slots = req_to_token[int(req_pool_indices[i]), : int(seq_lens[i])].long()
        kr = k_buffer[slots].float() * (k_scale or 1.0)
        vr = v_buffer[slots].float() * (v_scale or 1.0)
        allowed = torch.ones(1, slots.shape[0], dtype=torch.bool)
        o[i : i + 1] = _attend(q[i : i + 1], kr, vr, sm_scale, allowed).to(o.dtype)


# The attention backend looks these up on torch.ops.sgl_kernel when it is built.
_ns = torch.ops.sgl_kernel
setattr(_ns, "extend_attention_cpu", extend_attention_cpu)  # noqa: B010
setattr(_ns, "decode_attention_cpu", decode_attention_cpu)  # noqa: B010
