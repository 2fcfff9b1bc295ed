"""The adopt tests' ground truth: an uninterrupted run, and how an earlier script saved files."""

from __future__ import annotations

import os

import pytest

from tests.conftest import runner, write_job
from tests.runner.helpers import tensors

N = 12


@pytest.fixture(scope="module")
def reference(tmp_path_factory, demo_assets):
    """A (conf, tensors) of an uninterrupted 12-sample run: the ground truth."""
    conf = write_job(tmp_path_factory.mktemp("reference"), demo_assets, N)
    runner("run", "--config", conf, check=True)
    return conf, tensors(conf)


def save(path: str, t: dict) -> None:
    """What an earlier script did: a plain torch.save straight to the final name."""
    import torch

    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({k: t[k] for k in ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")}, path)
