"""Where each kind keeps its run (``[train]``, ``[measure]``, ``[regenerate]``, ``[pipeline]``
``run_dir``), and the one rule for all of them: hsx writes a run's ``status.json``, ``.lock`` and
work there, so the folder is not a link, not inside the job's output or model, not the dataset's
folder, not another kind's run dir, and new, empty or this kind's own.

A run dir is a kind's own when its ``.hsx-run`` mark names that kind (a training's mark from
before the name is empty), or, from before the mark, when it holds that kind's own files.
"""

from __future__ import annotations

import json
import os

from ..contract import measure, pipeline, regenerate, train
from ..contract.atomic import no_follow, read_object
from ..contract.config import Config
from ..contract.errors import ConfigError
from ..contract.kinds import KINDS as SPECS
from ..contract.ranks import STATE_FILE
from ..contract.status import STATUS

MARK = ".hsx-run"
KINDS = tuple(name for name, spec in SPECS.items() if spec.run_dir)  # the kinds with a run dir
_RECORDS = {"train": train.TrainRecord, "measure": measure.MeasureRecord,
            "regenerate": regenerate.RegenerateRecord, "pipeline": pipeline.PipelineRecord}  # fmt: skip


def of(cfg: Config, kind: str) -> str:
    """The kind's run dir: ``[KIND] run_dir``, else beside ``[job] out`` as ``OUT-KIND``."""
    return os.path.abspath(SPECS[kind].run_dir(cfg) or cfg.job.out.rstrip("/") + f"-{kind}")


def inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def theirs(cfg: Config, path: str, what: str) -> None:
    """Refuse ``path`` inside (or equal to) the job's output or model folder, or the dataset's
    own folder (a run dir beside the dataset is fine; one holding it is not new)."""
    for name, folder in (("[job] out", cfg.job.out), ("[job] model", cfg.job.model)):
        if folder and inside(path, folder):
            raise ConfigError(f"{what} {path} is inside {name} ({folder}): set it elsewhere")
    data = os.path.dirname(os.path.abspath(cfg.job.dataset)) if cfg.job.dataset else ""
    if data and os.path.realpath(path) == os.path.realpath(data):
        raise ConfigError(f"{what} {path} is the dataset's folder: set it elsewhere")


def owner(root: str, kind: str) -> str | None:
    """Which kind's run ``root`` holds, by its mark or, from before the mark, by its files (``kind``
    first, where they could be more than one's); None: none that hsx wrote."""
    try:
        with open(os.path.join(root, MARK)) as f:
            return f.read().strip() or "train"
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        return None
    return _unmarked(root, kind)


def _unmarked(root: str, kind: str) -> str | None:
    try:
        with open(os.path.join(root, "run.yaml")) as f:
            if json.load(f).get("output_dir") == os.path.join(root, "output"):
                return "train"
    except (OSError, ValueError, AttributeError):
        pass
    if os.path.exists(os.path.join(root, STATE_FILE)):
        return "regenerate"  # the only kind with a Slurm state file in its run dir
    d = read_object(os.path.join(root, STATUS))
    if d is not None:  # a record whose every key one kind's record has
        for k in sorted(_RECORDS, key=lambda k: k != kind):
            if set(d) <= set(_RECORDS[k].__dataclass_fields__):
                return k
    return None


def check(cfg: Config, kind: str) -> str:
    """The kind's run dir once it is one hsx may write into (ConfigError saying why not)."""
    root, what = of(cfg, kind), f"[{kind}] run_dir"
    if os.path.islink(root):
        raise ConfigError(f"{what} {root} is a symlink: name the real folder")
    theirs(cfg, root, what)
    for other in KINDS:
        if other != kind and os.path.realpath(root) == os.path.realpath(of(cfg, other)):
            raise ConfigError(f"{what} {root} is the {other} run dir too: give each kind its own")
    if not os.path.lexists(root):
        return root
    if not os.path.isdir(root):
        raise ConfigError(f"{what} {root} is not a folder")
    held = owner(root, kind)
    if held not in (None, kind):
        raise ConfigError(f"{what} {root} holds a {held} run: set a new or empty folder")
    if held is None and os.listdir(root):
        raise ConfigError(
            f"{what} {root} holds files hsx did not write (no {MARK}): "
            "a start would write over them; set a new or empty folder"
        )
    return root


def claim(cfg: Config, kind: str) -> str:
    """``check``, then the folder made and marked as the kind's: every start's first write."""
    root = check(cfg, kind)
    os.makedirs(root, exist_ok=True)
    if not os.path.lexists(os.path.join(root, MARK)):
        fd = no_follow(os.path.join(root, MARK), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, kind.encode() + b"\n")
        finally:
            os.close(fd)
    return root


def refusal(cfg: Config, kind: str) -> str | None:
    """Why the kind's run dir is not one hsx may write into; None: it is."""
    try:
        check(cfg, kind)
    except ConfigError as e:
        return str(e)
    return None
