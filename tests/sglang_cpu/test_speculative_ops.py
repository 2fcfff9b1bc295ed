"""The stand-in's EAGLE ops (tests/sglang_cpu/sgl_kernel) on tiny cases worked out by hand; the
real SGLang drives them in tests/real_sglang/test_measure.py (a chain and the 5/4/8 tree)."""

from __future__ import annotations

import pytest
import torch

from tests.sglang_cpu import sgl_kernel as k

# One request, a chain of 3 drafts after the bonus token: nodes 0 (root) -> 1 -> 2 -> 3.
CHAIN_NEXT = [[1, 2, 3, -1]]
NO_SIBLING = [[-1, -1, -1, -1]]


def verify(candidates, target, next_token=CHAIN_NEXT, next_sibling=NO_SIBLING, steps=4):
    predicts = torch.full((len(candidates[0]),), -7, dtype=torch.int32)
    accept_index = torch.full((1, steps), -1, dtype=torch.int32)
    accept_num = torch.zeros(1, dtype=torch.int32)
    k.verify_tree_greedy_cpu(
        predicts, accept_index, accept_num, torch.tensor(candidates), torch.tensor([[0, 1, 2, 3]]),
        torch.tensor(next_token), torch.tensor(next_sibling), torch.tensor(target),
    )  # fmt: skip
    return predicts.tolist(), accept_index.tolist()[0], int(accept_num)


def test_verify_on_a_chain_accepts_the_matching_prefix_and_the_bonus():
    # drafts 11, 12, 13; the target's argmax after root, 1, 2, 3: 11, 12, 99, 5
    predicts, index, num = verify([[10, 11, 12, 13]], [[11, 12, 99, 5]])
    assert num == 2 and index == [0, 1, 2, -1]
    assert predicts == [11, 12, 99, -7]  # the accepted tokens, then the bonus at node 2
    predicts, index, num = verify([[10, 40, 12, 13]], [[11, 12, 99, 5]])
    assert num == 0 and index == [0, -1, -1, -1] and predicts == [11, -7, -7, -7]
    predicts, index, num = verify([[10, 11, 12, 99]], [[11, 12, 99, 5]])
    assert num == 3 and index == [0, 1, 2, 3] and predicts == [11, 12, 99, 5]


def test_verify_on_a_tree_takes_the_matching_sibling():
    # root's children 1 and 2 (2 = 1's sibling), 3 the child of 2
    predicts, index, num = verify(
        [[10, 20, 21, 30]], [[21, 0, 30, 8]], next_token=[[1, -1, 3, -1]], next_sibling=[[-1, 2, -1, -1]]
    )
    assert num == 2 and index == [0, 2, 3, -1] and predicts == [21, -7, 30, 8]


def test_build_tree_links_depths_and_mask():
    """topk 2, 2 steps, 4 verify tokens. Step 0 drafted candidates 0, 1 (children of the
    root); step 1 drafted 2..5, whose parent is candidate (index // topk - 1) of step 0:
    parent_list[b] = [root slot, 0, 1] names them. Selected: 0, 1, 3 -> nodes 1, 2, 3, node 3
    (candidate 3, 3 // 2 = 1 -> parent_list[1] = 0) the child of node 1."""
    D = 4
    mask = torch.ones(D * D, dtype=torch.bool)
    positions = torch.empty(D, dtype=torch.int64)
    ri, rnt, rns = torch.full((3, 1, D), -1, dtype=torch.int64)
    k.build_tree_kernel_efficient_cpu(
        torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 3]]), torch.tensor([7]), mask, positions,
        ri, rnt, rns, 2, 2, D, 1,
    )  # fmt: skip
    assert ri.tolist() == [[0, 1, 2, 3]]
    assert rnt.tolist() == [[1, 3, -1, -1]] and rns.tolist() == [[-1, 2, -1, -1]]
    assert positions.tolist() == [7, 8, 8, 9]
    assert mask.view(D, D).int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    # FULL_MASK: each row is the 7 prefix columns (the caller's True) and then the same block
    full = torch.ones(7 * D + D * D, dtype=torch.bool)
    ri, rnt, rns = torch.full((3, 1, D), -1, dtype=torch.int64)
    k.build_tree_kernel_efficient_cpu(
        torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 3]]), torch.tensor([7]), full, positions,
        ri, rnt, rns, 2, 2, D, 0,
    )  # fmt: skip
    rows = full.view(D, 7 + D)
    assert rows[:, :7].all() and torch.equal(rows[:, 7:], mask.view(D, D))


@pytest.mark.parametrize("tree", [False, True])
def test_extend_attention_applies_the_tree_mask_over_a_cached_prefix(tree):
    """Two requests, each a cached prefix of 3 and 4 new tokens, against softmax attention
    computed with an explicit [new, prefix + new] mask."""
    torch.manual_seed(0)
    heads, kv_heads, d, prefix, ext = 4, 2, 8, 3, 4
    kbuf, vbuf = torch.randn(20, kv_heads, d), torch.randn(20, kv_heads, d)
    q = torch.randn(2 * ext, heads, d)
    kn, vn = torch.randn(2 * ext, kv_heads, d), torch.randn(2 * ext, kv_heads, d)
    req_to_token = torch.zeros(4, 16, dtype=torch.int32)
    req_to_token[2, :prefix] = torch.tensor([5, 9, 1])
    req_to_token[0, :prefix] = torch.tensor([12, 3, 17])
    block = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    causal = torch.ones(ext, ext, dtype=torch.bool).tril()
    tree_mask = torch.cat([block.flatten(), causal.flatten()]) if tree else None
    o = torch.empty_like(q)
    k.extend_attention_cpu(
        q, kn, vn, o, kbuf, vbuf, 1.0, 1.0, req_to_token, torch.tensor([2, 0]), torch.tensor([7, 7]),
        torch.tensor([ext, ext]), torch.tensor([0, ext]), ext, 0.5, 0.0, False, 0, None, None, tree_mask, True,
    )  # fmt: skip
    for r, pool in enumerate([2, 0]):
        new = slice(r * ext, (r + 1) * ext)
        loc = req_to_token[pool, :prefix].long()
        keys = torch.cat([kbuf[loc], kn[new]]).repeat_interleave(2, dim=1)
        vals = torch.cat([vbuf[loc], vn[new]]).repeat_interleave(2, dim=1)
        sees = block if (tree and r == 0) else causal
        allowed = torch.cat([torch.ones(ext, prefix, dtype=torch.bool), sees], dim=1)
        for i in range(ext):
            for h in range(heads):
                s = (keys[:, h] @ q[new][i, h]) * 0.5
                s[~allowed[i]] = float("-inf")
                want = torch.softmax(s, 0) @ vals[:, h]
                torch.testing.assert_close(o[new][i, h], want)


def test_decode_attention_writes_the_new_key_and_reads_it_back():
    torch.manual_seed(1)
    kbuf, vbuf = torch.zeros(10, 1, 4), torch.zeros(10, 1, 4)
    kbuf[[2, 6]], vbuf[[2, 6]] = torch.randn(2, 1, 4), torch.randn(2, 1, 4)
    q, key, value = torch.randn(1, 2, 4), torch.randn(1, 1, 4), torch.randn(1, 1, 4)
    req_to_token = torch.tensor([[2, 6, 8, 0]], dtype=torch.int32)
    o = torch.empty_like(q)
    k.decode_attention_cpu(
        q, kbuf, vbuf, 1.0, 1.0, o, key, value, torch.tensor([8]), None, req_to_token, torch.tensor([0]),
        torch.tensor([3]), 1.0, 0.0, False, 0, None, None,
    )  # fmt: skip
    assert torch.equal(kbuf[8], key[0]) and torch.equal(vbuf[8], value[0])
    keys, vals = kbuf[[2, 6, 8], 0], vbuf[[2, 6, 8], 0]
    for h in range(2):
        torch.testing.assert_close(o[0, h], torch.softmax(keys @ q[0, h], 0) @ vals)


def test_an_op_not_ported_raises_by_name():
    with pytest.raises(k.StandInMissing, match="rotate_input_ids_cpu"):
        k.rotate_input_ids_cpu()
