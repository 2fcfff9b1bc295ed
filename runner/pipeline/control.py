"""``hsx-runner pipeline start|status|stop``: start (which resumes a pipeline that stopped or
crashed where it stopped), the status with each stage's phase read live, and stop (the stage
under way stopped too)."""

from __future__ import annotations

import dataclasses

from ..contract.config import Config
from ..contract.replies import OK, Reply
from ..job import rundir, supervised
from ..job.supervised import refused
from .record import KIND
from .stages import STAGES


def run_dir(cfg: Config) -> str:
    return rundir.of(cfg, "pipeline")


def start(cfg: Config) -> Reply:
    root = run_dir(cfg)
    if not cfg.pipeline.stages:
        return refused(
            'no pipeline: set [pipeline] stages, e.g. ["regenerate", "extract", "train", "measure"]'
        )
    if reply := supervised.running(KIND, root):
        return reply
    if why := rundir.refusal(cfg, "pipeline"):
        return refused(why)
    rundir.claim(cfg, "pipeline")
    how = "resumed" if KIND.read(root).started_at else "started"
    return supervised.launch(KIND, root, cfg.path, how, stages=list(cfg.pipeline.stages))


def stop(cfg: Config, wait_s: float = 60.0) -> Reply:
    return supervised.stop(run_dir(cfg), wait_s, "stops its stage")


def status(cfg: Config) -> Reply:
    """The record, each stage's phase read live beside it, and the stage under way's status."""
    root = run_dir(cfg)
    rec = KIND.read(root)
    rec = dataclasses.replace(
        rec, run_dir=rec.run_dir or root, stages=rec.stages or list(cfg.pipeline.stages)
    )
    d = rec.to_dict()
    d["phases"], d["current"] = {}, None
    for name in rec.stages:
        s = STAGES[name].status(cfg)
        d["phases"][name] = s.get("phase")
        if name == rec.stage:
            d["current"] = s
    from ..text.pipeline import line

    return Reply(d, line(d), OK)
