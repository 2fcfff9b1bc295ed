"""SpecForge's step lines and checkpoint completeness (runner/train/progress.py), on real files."""

from __future__ import annotations

import math

from runner.train import progress

from .units import _ckpt


def test_step_line_with_nan_and_inf_is_parsed_never_evaluated(tmp_path):
    step, m = progress.parse_step(
        "step 12: {'loss': nan, 'acc': 0.5, 'grad_norm': inf, 'x': -inf, 'lr': -1e-4}"
    )
    assert step == 12 and math.isnan(m["loss"]) and m["acc"] == 0.5 and m["grad_norm"] == math.inf
    assert m["x"] == -math.inf and m["lr"] == -1e-4
    planted = tmp_path / "planted"
    line = f"step 1: {{'loss': __import__('os').mkdir({str(planted)!r})}}"
    assert progress.parse_step(line) is None and not planted.exists()
    assert progress.parse_step("step 3: {'loss': 1.0") is None  # cut short
    assert progress.parse_step("[rank0] loading target head") is None
    assert progress.number(math.nan) is None and progress.number(2) == 2.0


def test_a_checkpoint_counts_only_with_every_ranks_file_and_no_tmp(tmp_path):
    out = tmp_path / "output"
    _ckpt(out, 10, ["training_state.pt", "training_state_rank0.pt", "training_state_rank1.pt"])
    _ckpt(out, 20, ["training_state.pt", "training_state_rank0.pt"])  # rank 1 still writing
    _ckpt(out, 30, ["training_state.pt", "training_state_rank0.pt", "training_state_rank1.pt.tmp"])
    synced: set[int] = set()
    assert progress.checkpoints(str(out), "hsx-eagle3") == [10, 20, 30]
    assert progress.durable(str(out), "hsx-eagle3", 2, synced) == 10 and synced == {10}
    assert progress.durable(str(out), "hsx-eagle3", 1, set()) == 20  # one rank: 20 is whole
