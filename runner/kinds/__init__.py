"""The kinds of job a pipeline's stage is, each answered in one place: which control answers an
action (this box's or Slurm's) and what must hold first (the trainer's interpreter resolved, the
features held against a training). ``answer`` gives the ``Reply`` the CLI prints; the pipeline
calls ``answer`` and ``status`` in its own process, typed, never through the CLI. The extraction
is the kind ``extract`` (hsx-runner's unprefixed verbs). A rung above engines, below the
pipeline: imports the contract, the text and, lazily, the controls of the rungs below it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..contract.config import AUTO_PYTHON, Config
from ..contract.errors import HsxError, StatusError
from ..contract.replies import BROKEN, OK, REFUSED, USAGE, Reply

Table = dict[str, Callable[[], Reply]]


def resolve_trainer(cfg: Config) -> None:
    """``[train] python = "auto"`` as the venv hsx builds for this box: asked of NVML only where a
    verb trains, never on the status polls."""
    if cfg.train.python == AUTO_PYTHON:
        from ..train import interpreter

        interpreter.resolve_config(cfg)


def held(cfg: Config, what: str, fn: Callable[[], Reply]) -> Reply:
    """``fn()`` with the features held against a training start (train.exclusive); refused,
    naming the run, while a training uses them."""
    from ..train import exclusive

    try:
        with exclusive.using(cfg.job.out, what):
            return fn()
    except exclusive.Refused as e:
        return Reply({"started": False, "refused": True, "reason": str(e)}, str(e), REFUSED)


def _extract(cfg: Config, wait: float, force: bool) -> Table:
    from ..engines import engine_for

    eng = engine_for(cfg)

    def status() -> Reply:
        from ..text.extraction import render_text

        rec = eng.status()
        return Reply(rec.to_dict(), render_text(rec))

    return {
        "start": lambda: held(cfg, "the extraction's start", lambda: eng.start(force)),
        "resume": lambda: held(cfg, "the extraction's resume", lambda: eng.resume(force)),
        "stop": lambda: eng.stop(wait),
        "status": status,
    }


def _train(cfg: Config, wait: float, force: bool) -> Table:
    from ..train import control, exporter

    via = control
    if cfg.cluster.engine == "slurm":
        from ..engines import slurm_train as via

    def trains(fn: Callable[[Config], Reply]) -> Callable[[], Reply]:
        def run() -> Reply:  # what runs the trainer's python
            resolve_trainer(cfg)
            return fn(cfg)

        return run

    return {
        "start": trains(via.start),
        "resume": trains(via.resume),
        "stop": lambda: via.stop(cfg, wait),
        "status": lambda: via.status(cfg),
        "after-extraction": lambda: via.after_extraction(cfg),
        "history": lambda: control.history(cfg),
        "export": trains(exporter.export),
    }


def _measure(cfg: Config, wait: float, force: bool) -> Table:
    from ..measure import control

    return {
        "start": lambda: control.start(cfg),
        "resume": lambda: control.resume(cfg),
        "stop": lambda: control.stop(cfg, wait),
        "status": lambda: control.status(cfg),
    }


def _regenerate(cfg: Config, wait: float, force: bool) -> Table:
    from ..regenerate import control as via

    if cfg.cluster.engine == "slurm":  # the rows split across [cluster] ranks, one sbatch array
        from ..engines import slurm_regenerate as via

    return {
        "start": lambda: via.start(cfg),
        "resume": lambda: via.resume(cfg),
        "stop": lambda: via.stop(cfg, wait),
        "status": lambda: via.status(cfg),
    }


KINDS: dict[str, Callable[[Config, float, bool], Table]] = {
    "regenerate": _regenerate,
    "extract": _extract,
    "train": _train,
    "measure": _measure,
}


def answer(kind: str, cfg: Config, action: str, wait: float = 30.0, force: bool = False) -> Reply:
    """What ``hsx-runner [KIND] ACTION`` answers. Raises what the CLI turns into its exit codes
    (a broken record, a bad config)."""
    return KINDS[kind](cfg, wait, force)[action]()


def call(kind: str, cfg: Config, action: str, wait: float = 30.0) -> tuple[int, dict]:
    """``answer`` for a caller in this process (the pipeline): the exit code and the JSON object
    the CLI would print, an error as its reason."""
    try:
        r = answer(kind, cfg, action, wait)
    except HsxError as e:  # a broken record or config: said, not raised
        return (BROKEN if isinstance(e, StatusError) else USAGE), {"reason": str(e)}
    obj = r.payload()
    if r.code != OK and not obj.get("reason"):
        obj = {**obj, "reason": r.text[-500:] or f"exit code {r.code}"}
    return r.code, obj
