"""Each kind of supervised job as both sides name it: its ``hsx-runner`` verb (also its stage's
and its config section's name), its actions, which of them wait long and how long the ops side
lets them, and how its status reply is read, typed. The box answers through ``runner.kinds``; the
ops side asks through ``remote.client.GpuBox.call`` and ``GpuBox.record``, by this table, never
by a method named after the kind. The extraction is ``hsx-runner extract ACTION``; its unprefixed
verbs (``hsx-runner start``, the ones operators and older clients use) stay as aliases."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import measure, pipeline, regenerate, status, train
from .replies import NOT_OK, OK, REFUSED
from .stages import RegenerateConfig


@dataclass(frozen=True)
class KindSpec:
    name: str
    actions: tuple[str, ...]
    record: Callable[[Any], Any]  # the status reply, typed (with a to_dict); a StatusError says what is wrong
    help: str  # `hsx-runner KIND`'s line in --help
    # the actions that wait for a supervisor's claim (or run the trainer), and how long the ops
    # side waits for one of them
    long: frozenset[str] = frozenset({"start", "resume"})
    long_s: float = 600.0
    stop_wait_s: float = 30.0  # `stop --wait`'s default: how long the box waits for it to end
    stage: bool = True  # a pipeline's stage (the pipeline is not one of its own)
    forced: frozenset[str] = frozenset()  # the actions `--force` may pass preflight's gates for
    # its section's run_dir as configured ("": beside [job] out); None: it writes into [job] out
    run_dir: Callable[[Any], str] | None = None
    # whether a config asks for it, so that "progress?" and the watcher follow it (its verbs
    # answer whatever the config says)
    followed: Callable[[Any], bool] = lambda cfg: True
    # its exit codes that are answers: refused, the reply says why (running, not running, nothing
    # to work on)
    codes: tuple[int, ...] = (OK, REFUSED)
    unit: str = ""  # what its record's done / total count (a training's counts steps)

    def timeout_s(self, action: str, default: float) -> float:
        return max(default, self.long_s if action in self.long else 0.0)

    def check(self, action: object) -> str:
        if action not in self.actions:
            raise ValueError(
                f"{self.name}: the action must be one of {', '.join(self.actions)}, got {action!r}"
            )
        return str(action)


EXTRACT = KindSpec(
    "extract",
    ("start", "resume", "stop", "status"),
    status.StatusRecord.from_dict,
    "the extraction's start, resume, stop and status (also unprefixed: hsx-runner start)",
    forced=frozenset({"start", "resume"}),  # preflight first: the server's interpreter asked
    unit="samples",
)
TRAIN = KindSpec(
    "train",
    train.ACTIONS,
    train.TrainRecord.from_dict,
    "train the EAGLE-3 draft on the output with SpecForge ([train])",
    # the start checks the trainer's interpreter; export runs SpecForge's exporter
    long=frozenset({"setup", "start", "resume", "export"}),
    long_s=1800.0,
    run_dir=lambda cfg: cfg.train.run_dir,
    followed=lambda cfg: bool(cfg.train.python),
    codes=(OK, NOT_OK, REFUSED),  # export or setup failed
)
MEASURE = KindSpec(
    "measure", measure.ACTIONS, measure.MeasureRecord.from_dict, run_dir=lambda cfg: cfg.measure.run_dir,
    help="measure the exported draft in SGLang, against the target alone ([measure])",
    followed=lambda cfg: bool(cfg.train.python or cfg.measure.draft),  # one trained here, or one named
    unit="requests",
)  # fmt: skip
REGENERATE = KindSpec(
    "regenerate", regenerate.ACTIONS, regenerate.RegenerateRecord.from_dict,
    help="write the dataset's answers again with the target ([regenerate])",
    run_dir=lambda cfg: cfg.regenerate.run_dir,
    followed=lambda cfg: cfg.regenerate != RegenerateConfig(),  # a key set to other than its default
    unit="rows",
)  # fmt: skip
PIPELINE = KindSpec(
    "pipeline",
    pipeline.ACTIONS,
    pipeline.PipelineStatus.from_dict,
    "run [pipeline] stages as one, each handing on to the next; start again resumes",
    long=frozenset({"start"}),
    stop_wait_s=60.0,  # its stage stops first
    stage=False,
    run_dir=lambda cfg: cfg.pipeline.run_dir,
    followed=lambda cfg: bool(cfg.pipeline.stages),
)
KINDS = {k.name: k for k in (EXTRACT, TRAIN, MEASURE, REGENERATE, PIPELINE)}
