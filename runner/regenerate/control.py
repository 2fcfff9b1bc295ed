"""``hsx-runner regenerate start|resume|stop|status``: cheap refusals first, then the detached
supervisor (runner/regenerate/supervisor.py), which claims the run by holding its lock."""

from __future__ import annotations

import dataclasses
import os

from ..contract.atomic import read_jsonl
from ..contract.config import Config
from ..contract.ranks import STATE_FILE
from ..contract.regenerate import FAILED_SUFFIX, META_SUFFIX, ROWS
from ..contract.replies import OK, Reply
from ..contract.stages import regenerated_path
from ..job import rundir, supervised
from ..job.supervised import refused
from .record import KIND

HISTORY = "history.jsonl"  # in the run dir: a progress point every few seconds, for the chart
HISTORY_POINTS = 500  # the status reply carries this many of the last


def run_dir(cfg: Config) -> str:
    return rundir.of(cfg, "regenerate")


def source(cfg: Config) -> str:
    return os.path.abspath(cfg.regenerate.input or cfg.job.dataset)


def output(cfg: Config) -> str:
    return os.path.abspath(cfg.regenerate.output or regenerated_path(source(cfg)))


def failures(cfg: Config) -> str:
    return output(cfg).removesuffix(".jsonl") + FAILED_SUFFIX


def meta(cfg: Config) -> str:
    return output(cfg).removesuffix(".jsonl") + META_SUFFIX


def same_file(a: str, b: str) -> bool:
    """``a`` and ``b`` are one file however each is named: through a symlinked folder or link
    (their real paths), or a hard link (one inode)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def overwrites(cfg: Config, src: str) -> str | None:
    """Which file the regeneration writes (the output, its failures or its meta file) is the input
    dataset ``src``, under another name; None: none is."""
    return next((p for p in (output(cfg), failures(cfg), meta(cfg)) if same_file(p, src)), None)


def refusal(cfg: Config) -> Reply | None:
    """What the config itself refuses, wherever the regeneration runs (this box, or Slurm); asked
    at start and at every resume (a Resume button's, a pipeline's), so a config edited meanwhile
    is checked too."""
    if why := rundir.refusal(cfg, "regenerate"):
        return refused(why)
    if not os.path.isfile(source(cfg)):
        return refused(f"no dataset at {source(cfg)} ([regenerate] input, else [job] dataset)")
    if hit := overwrites(cfg, source(cfg)):
        return refused(f"[regenerate] output: {hit} is the input dataset {source(cfg)}: name another file")
    return None


def _cheap(cfg: Config, root: str) -> Reply | None:
    return supervised.running(KIND, root) or refusal(cfg)


def start(cfg: Config) -> Reply:
    root = run_dir(cfg)
    if reply := _cheap(cfg, root):
        return reply
    if os.path.exists(os.path.join(root, ROWS)):
        return refused(
            f"{root} holds a regeneration: resume it (hsx-runner regenerate resume), or move it aside"
        )
    if os.path.exists(os.path.join(root, STATE_FILE)):
        return refused(f'{root} holds a regeneration on Slurm: resume it there ([cluster] engine = "slurm")')
    if os.path.exists(output(cfg)):
        return refused(f"{output(cfg)} exists: move it aside, or name another [regenerate] output")
    rundir.claim(cfg, "regenerate")
    return supervised.launch(KIND, root, cfg.path, "started", source=source(cfg), output=output(cfg))


def resume(cfg: Config) -> Reply:
    root = run_dir(cfg)
    if reply := _cheap(cfg, root):
        return reply
    if reply := supervised.not_resumable(KIND, root, lambda rec: f": {rec.output}"):
        return reply
    return supervised.launch(KIND, root, cfg.path, "resumed", source=source(cfg), output=output(cfg))


def stop(cfg: Config, wait_s: float = 30.0) -> Reply:
    return supervised.stop(run_dir(cfg), wait_s, "ends")


def status(cfg: Config) -> Reply:
    root = run_dir(cfg)
    rec = KIND.read(root)
    rec = dataclasses.replace(rec, run_dir=rec.run_dir or root, source=rec.source or source(cfg),
                              output=rec.output or output(cfg), failures=rec.failures or failures(cfg))  # fmt: skip
    d = rec.to_dict()
    d["history"] = read_jsonl(os.path.join(root, HISTORY), last=HISTORY_POINTS)
    from ..text.regenerate import line

    return Reply(d, line(rec), OK)
