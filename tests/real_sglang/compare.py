"""Compare two outputs sample by sample: tokens and masks exactly, hidden states within a
tolerance (different kernels, batching and bf16 rounding), per layer, per token."""

from __future__ import annotations

import json
import os

# Per token and layer: the right layer agrees to ~0.9999 here, the next one to ~0.8.
MIN_COSINE = 0.999
# Final-norm values reach ~4 here: a bf16 ulp there is 0.03.
MAX_ABS = {"bfloat16": 0.25, "float32": 1e-3}


def _info(out: str) -> dict:
    with open(os.path.join(out, "dataset.json")) as f:
        return json.load(f)


def compare(out: str, ref: str, bits: int | None = None) -> dict:
    """Worst cosine and max abs difference over every sample, layer and token; raises
    AssertionError naming the first sample outside the tolerance. ``bits``: ``out`` holds bf16
    rounded to that many mantissa bits, ``ref`` exact ones: the max abs bound gives way to the
    relative error rounding allows (half an ulp at that many bits)."""
    import torch
    import torch.nn.functional as F

    from runner.codec.ckpt import load_sample
    from runner.codec.precision import relative_error
    from runner.output.store import find_sample

    a_info, b_info = _info(out), _info(ref)
    assert a_info["aux_layer_ids"] == b_info["aux_layer_ids"], (
        a_info["aux_layer_ids"],
        b_info["aux_layer_ids"],
    )
    h = a_info["hidden_size"]
    max_abs = MAX_ABS[a_info["dtype"]]
    worst = {"cosine": 1.0, "max_abs": 0.0, "samples": 0}
    if bits is not None:
        worst["relative_error"] = 0.0
    for i in range(a_info["total"]):
        a = load_sample(find_sample(out, i), mmap=False)
        b = load_sample(find_sample(ref, i), mmap=False)
        assert torch.equal(a["input_ids"], b["input_ids"]), f"sample {i}: input_ids differ"
        assert torch.equal(a["loss_mask"], b["loss_mask"]), f"sample {i}: loss_mask differs"
        assert a["hidden_state"].shape == b["hidden_state"].shape == (1, len(a["input_ids"]), h), i
        assert (
            a["aux_hidden_state"].shape == b["aux_hidden_state"].shape == (1, len(a["input_ids"]), 3 * h)
        ), i
        pairs = [("final", a["hidden_state"][0], b["hidden_state"][0])]
        pairs += [
            (f"aux layer {lid}", a["aux_hidden_state"][0, :, j * h : (j + 1) * h], b["aux_hidden_state"][0, :, j * h : (j + 1) * h])
            for j, lid in enumerate(a_info["aux_layer_ids"])
        ]  # fmt: skip
        for name, x, y in pairs:
            x, y = x.float(), y.float()
            cos = F.cosine_similarity(x, y, dim=-1).min().item()
            diff = (x - y).abs().max().item()
            if bits is None:
                assert cos >= MIN_COSINE and diff <= max_abs, (
                    f"sample {i} {name}: cosine {cos:.5f}, max abs {diff:.4f}"
                )
            else:
                err = relative_error(y, x)
                assert cos >= MIN_COSINE and err <= 2.0 ** -(bits + 1), (
                    f"sample {i} {name}: cosine {cos:.5f}, error {err:.4f}"
                )
                worst["relative_error"] = max(worst["relative_error"], err)
            worst["cosine"] = min(worst["cosine"], cos)
            worst["max_abs"] = max(worst["max_abs"], diff)
        worst["samples"] += 1
    return worst
