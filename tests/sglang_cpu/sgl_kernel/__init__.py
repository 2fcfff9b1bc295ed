"""Test-only stand-in for SGLang's CPU kernel package, for the real-SGLang CPU lane.

PyPI's ``sgl-kernel`` is a CUDA build; the CPU build needs compiling. SGLang's CPU engine,
on the paths these tests drive (Llama on ``torch_native`` attention, DeepSeek-V3 MLA with
``intel_amx`` prefill), calls only the ops below, written here in plain torch. Every other
name resolves to a function that raises, naming the op: a new call is a clear failure,
never a silently wrong result.
"""

from __future__ import annotations

import torch


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


def extend_attention_cpu(
    q, k, v, o, k_buffer, v_buffer, k_scale, v_scale, req_to_token, req_pool_indices, seq_lens,
    extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap, is_cross, window,
    encoder_lens, sinks, tree_mask, is_causal,
):  # fmt: skip
    """Causal attention of each request's new queries over its cached prefix plus its new keys
    (GQA), written into ``o`` in place. Eager prefill only: no tree mask, window, sinks,
    cross attention or logit cap."""
    if tree_mask is not None or sinks is not None or is_cross or not is_causal or (logit_cap or 0) > 0:
        raise StandInMissing("extend_attention_cpu: tree mask, sinks, cross/non-causal, logit cap")
    if window is not None and window > 0:
        raise StandInMissing("extend_attention_cpu: sliding window")
    heads, kv_heads = q.shape[1], k.shape[1]
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
        qr = q[start : start + ext].float().transpose(0, 1)  # [heads, ext, d]
        kr = kr.float().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
        vr = vr.float().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
        scores = (qr @ kr.transpose(1, 2)) * sm_scale  # [heads, ext, prefix+ext]
        total = prefix + ext
        causal = torch.ones(ext, total, dtype=torch.bool).tril(diagonal=prefix)
        scores = scores.masked_fill(~causal, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ vr  # [heads, ext, dv]
        o[start : start + ext] = out.transpose(0, 1).to(o.dtype)


# The attention backend looks these up on torch.ops.sgl_kernel when it is built.
_ns = torch.ops.sgl_kernel
setattr(_ns, "extend_attention_cpu", extend_attention_cpu)  # noqa: B010
setattr(_ns, "decode_attention_cpu", _missing("decode_attention_cpu"))  # noqa: B010
