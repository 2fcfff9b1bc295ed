"""The stand-in's EAGLE ops: torch ports of the CPU kernels SGLang 0.5.23's speculative path calls
(``kernels/ops/speculative/{cache_locs,eagle,spec_tree}.py``, the multi-step draft backend in
``intel_amx_backend.py``, the KV-copy warm-up in ``kernels/ops/kvcache/cache_move.py``).

Their semantics are sgl-kernel's ``csrc/cpu/spec.cpp`` and ``kvcache.cpp``. Plain loops, one
request at a time: correctness over speed (a batch here is a handful of requests). Every op
writes into the tensors it is given, as the kernels do; the callers rely on it.
"""

from __future__ import annotations

import ctypes

import torch


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """For every KV buffer b (a raw base address ``data_ptrs[b]`` with ``strides[b]`` bytes per
    slot): slot ``tgt_loc[i]`` = slot ``src_loc[i]``. All sources are read before any target is
    written, so overlapping moves are safe (the GPU kernel's tiles load before they store)."""
    src, tgt = src_loc.tolist(), tgt_loc.tolist()
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        rows = [ctypes.string_at(base + s * stride, stride) for s in src]
        for t, row in zip(tgt, rows, strict=True):
            ctypes.memmove(base + t * stride, row, stride)


def build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len):
    """The multi-step draft's req->token table: row ``b*topk + k`` is request b's committed
    prefix (its first ``seq_lens[b]`` slots) followed by branch k's ``num_steps`` draft slots,
    which assign_draft_cache_locs_contiguous laid out at ``seq_lens[b] + k*num_steps``."""
    num_seqs = req_pool_indices.shape[0]
    # Only the first seq_len + num_steps entries of a row are ever read; zeros elsewhere.
    out = torch.zeros((num_seqs * topk, pool_len), dtype=req_to_token.dtype)
    for b in range(num_seqs):
        row, sl = req_to_token[int(req_pool_indices[b])], int(seq_lens[b])
        for k in range(topk):
            out[b * topk + k, :sl] = row[:sl]
            start = sl + k * num_steps
            out[b * topk + k, sl : sl + num_steps] = row[start : start + num_steps]
    return out


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk, num_steps
):
    """Read back the draft slots the allocator reserved: request r's ``topk*num_steps`` slots
    from ``seq_lens[r]`` on, in ``req_to_token``, into ``out_cache_loc[r*topk*num_steps:]``."""
    n = topk * num_steps
    for r in range(req_pool_indices.shape[0]):
        s = int(seq_lens[r])
        out_cache_loc[r * n : (r + 1) * n] = req_to_token[int(req_pool_indices[r]), s : s + n].to(
            out_cache_loc.dtype
        )


def assign_extend_cache_locs_cpu(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len
):
    """Gather each request's slots ``[start_offset[r], end_offset[r])`` of ``req_to_token``
    into ``out_cache_loc``, requests packed one after another (the verify pass's cache locs)."""
    pos = 0
    for r in range(req_pool_indices.shape[0]):
        s, e = int(start_offset[r]), int(end_offset[r])
        out_cache_loc[pos : pos + e - s] = req_to_token[int(req_pool_indices[r]), s:e].to(out_cache_loc.dtype)
        pos += e - s


def _tree_parents(sel: list[int], parents: list[int], topk: int) -> list[int]:
    """Each tree node's parent node: for node i > 0 (the draft ``sel[i-1]``), 0 (the root) when
    ``sel[i-1] // topk`` is 0, else 1 + the place in ``sel`` of the draft ``parents`` names
    there; len(sel) + 1 (= D, no node) when that draft was not selected. Entry 0 unused."""
    up = [0]
    for i in range(1, len(sel) + 1):
        ptb = sel[i - 1] // topk
        tok = parents[ptb] if ptb else None
        up.append(0 if ptb == 0 else (sel.index(tok) if tok in sel else len(sel)) + 1)
    return up


def build_tree_kernel_efficient_cpu(
    parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
    retrive_next_token, retrive_next_sibling, topk, depth, draft_token_num, tree_mask_mode,
):  # fmt: skip
    """The verify pass's draft tree, per request b of D = ``draft_token_num`` tokens (node 0
    the bonus token, node i>0 the draft ``selected_index[b, i-1]``, whose parent is the node
    that drafted ``parent_list[b, selected_index[b, i-1] // topk]``, or the root when that
    quotient is 0):
      - retrive_index[b, i] = b*D + i; retrive_next_token[b, p] = p's first child and
        retrive_next_sibling[b, i] = i's next sibling (-1 = none; the caller pre-fills -1),
        children linked in ascending order;
      - positions[b*D + i] = seq_len + depth of node i;
      - tree_mask (True = may attend): node i sees the root, itself and its ancestors.
        QLEN_ONLY (mode 1, the CPU's) is a D x D block per request at b*D*D; FULL_MASK
        (mode 0) puts each row after the request's seq_len prefix columns, which the caller
        fills True."""
    if tree_mask_mode not in (0, 1):
        raise NotImplementedError("build_tree_kernel_efficient_cpu: QLEN_ONLY_BITPACKING")
    D = draft_token_num
    full_offset = 0
    for b in range(verified_seq_len.shape[0]):
        parents = [int(x) for x in parent_list[b].tolist()] if parent_list.numel() else []
        up = _tree_parents([int(x) for x in selected_index[b].tolist()], parents, topk)
        seq_len = int(verified_seq_len[b])
        off = b * D

        positions[off] = seq_len
        retrive_index[b, 0] = off
        # Walked from the last node down, so each parent's first child ends up the smallest.
        for i in range(D - 1, 0, -1):
            retrive_index[b, i] = off + i
            p = up[i]
            if p == D:  # a parent missing from the selection: left unlinked, as the kernel does
                continue
            if int(retrive_next_token[b, p]) != -1:
                retrive_next_sibling[b, i] = retrive_next_token[b, p]
            retrive_next_token[b, p] = i
        if tree_mask_mode == 1:
            rows = tree_mask.view(-1)[b * D * D : (b + 1) * D * D].view(D, D)
        else:
            width = seq_len + D
            rows = tree_mask.view(-1)[full_offset : full_offset + D * width].view(D, width)[:, seq_len:]
            full_offset += D * width
        rows.fill_(False)
        rows[:, 0] = True
        for i in range(1, D):
            node, depth_i = i, 0
            while 0 < node < D:  # up the ancestors to the root
                depth_i += 1
                rows[i, node] = True
                node = up[node]
            positions[off + i] = seq_len + depth_i


def verify_tree_greedy_cpu(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
    retrive_next_sibling, target_predict,
):  # fmt: skip
    """Greedy verification, per request b: from the root, step to the first child (then its
    siblings) whose draft token equals the target's argmax at the last accepted node; accept
    it and go on, up to ``accept_index.shape[1] - 1`` drafts, stopping at the first level
    with no match. Writes accept_index[b] (flat node indices, root first; the rest are left
    as given, -1 from the caller), accept_token_num[b] (accepted drafts, bonus excluded) and
    predicts[node] = the target's token at each accepted node (the last one is the bonus)."""
    steps = accept_index.shape[1]
    flat_target = target_predict.reshape(-1)
    for b in range(candidates.shape[0]):
        last = int(retrive_index[b, 0])
        accept_index[b, 0] = last
        accepted, cur = 0, 0
        for _ in range(1, steps):
            cur = int(retrive_next_token[b, cur])
            target = int(flat_target[last])
            while cur != -1:
                if int(candidates[b, cur]) == target:
                    predicts[last] = target
                    accepted += 1
                    last = int(retrive_index[b, cur])
                    accept_index[b, accepted] = last
                    break
                cur = int(retrive_next_sibling[b, cur])
            if cur == -1:
                break
        accept_token_num[b] = accepted
        predicts[last] = flat_target[last]


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    """bonus_tokens[r] = request r's last accepted token: ``accept_tokens`` (row stride
    ``accept_stride``) at ``accept_lens[r] - 1`` (accept_lens counts the bonus token)."""
    flat = accept_tokens.reshape(-1)
    for r in range(accept_lens.shape[0]):
        bonus_tokens[r] = flat[accept_stride * r + int(accept_lens[r]) - 1]


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc, size=None):
    """Compact the accepted tokens' KV slots: ``out_cache_loc`` at each entry of the flat
    ``accept_index`` that is not -1, in order, into ``accept_out_cache_loc``. (0.5.23's
    caller passes no ``size``: the whole index.)"""
    flat = accept_index.reshape(-1)
    n = flat.numel() if size is None else int(size)
    dst = 0
    for src in flat[:n].tolist():
        if src > -1:
            accept_out_cache_loc[dst] = out_cache_loc[src]
            dst += 1
