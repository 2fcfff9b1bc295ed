"""Engines: how the job runs, behind the verbs ``hsx-runner`` answers for it.

``local`` runs it on this box as one detached process; ``slurm`` hands its ranks to Slurm as
one array. The CLI picks one with ``engine_for`` and calls one method; each method answers a
``Reply`` (JSON object, text, exit code), or, for ``status``, the record. ``slurm_train`` and
``slurm_regenerate`` run the training and the regeneration on Slurm (``slurm_regenerate_merge``
its ranks as one record). The top rung of runner's stages: imports the contract, data, output,
serve, job, train and regenerate; only the CLI imports it."""

from __future__ import annotations

from ..contract.config import Config
from .base import Engine


def engine_for(cfg: Config) -> Engine:
    if cfg.cluster.engine == "slurm":
        from .slurm import SlurmEngine

        return SlurmEngine(cfg)
    from .local import LocalEngine

    return LocalEngine(cfg)
