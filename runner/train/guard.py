"""What an operator's training keys may not change, and where hsx may write.

``[train.specforge]`` is merged into run.yaml last: the keys below would move the checkpoints
out of the folder hsx watches, undo the save and keep floors that make a crash resumable, run
the target's own code against ``[job] trust_remote_code = false``, or train on features nobody
verified. Each is refused with the ``[train]`` or ``[job]`` key to use instead.

The run dir follows every kind's rule (``job.rundir``): a start replaces its ``features/`` and
``eval/`` and SpecForge deletes checkpoints it finds. An export dir is new, marked
``.hsx-export``, or the run's own ``export/``.
"""

from __future__ import annotations

import os
import stat

from ..contract.config import Config
from ..contract.errors import ConfigError
from ..job import rundir

EXPORT_MARK = ".hsx-export"
OWNED = {
    ("output_dir",): "[train] run_dir (checkpoints go to its output/, which hsx watches)",
    ("run_id",): "nothing: hsx names the checkpoints it resumes from",
    ("data", "hidden_states_path"): "[job] out (the features hsx verified)",
    ("data", "eval_hidden_states_path"): "[train] eval_samples",
    ("model", "target_model_path"): "[job] model",
    ("model", "draft_model_config"): "[job] draft_config",
    ("model", "trust_remote_code"): "[job] trust_remote_code",
    ("training", "save_interval"): "[train] save_interval",
    ("training", "max_checkpoints"): "[train] max_checkpoints",
    ("training", "resume_from"): "`/train resume` (hsx picks the last complete checkpoint)",
    ("data", "cache_dir"): "nothing: SpecForge's cache is kept in [train] run_dir",
    ("tracking", "report_to"): "nothing: the metrics stay on the box, in hsx's own history",
}


def specforge_keys(over: dict, base: dict) -> None:
    """Refuse (ConfigError) a ``[train.specforge]`` key hsx owns, or one that turns a table of
    run.yaml into a plain value, naming the key and what to set instead. A dotted key
    (``"training.save_interval" = 0``) is refused too: read as a path, it would pass every check
    made by table."""

    def dotted(o: dict, at: str) -> None:
        for k, v in o.items():
            if "." in k:
                raise ConfigError(
                    f"[train.specforge] {at}{k!r}: a dotted key; write it as a table, "
                    f"[train.specforge.{at}{k.rsplit('.', 1)[0]}] {k.rsplit('.', 1)[1]} = ... (nothing was written)"
                )
            if isinstance(v, dict):
                dotted(v, f"{at}{k}.")

    dotted(over, "")
    for path, instead in OWNED.items():
        d = over
        for k in path[:-1]:
            d = d.get(k) if isinstance(d, dict) else None
        if isinstance(d, dict) and path[-1] in d:
            raise ConfigError(
                f"[train.specforge] {'.'.join(path)} is hsx's to set; use {instead} instead (nothing was written)"
            )

    def tables(o: dict, b: dict, at: str) -> None:
        for k, v in o.items():
            if isinstance(b.get(k), dict):
                if not isinstance(v, dict):
                    raise ConfigError(
                        f"[train.specforge] {at}{k} must be a table, as in run.yaml (nothing was written)"
                    )
                tables(v, b[k], f"{at}{k}.")

    tables(over, base, "")


def export_dir(cfg: Config, out: str, root: str) -> None:
    """An export dir hsx may write into: new, marked as an earlier export's, or the run's own."""
    if os.path.islink(out):
        raise ConfigError(f"[train] export_dir {out} is a symlink: name the real folder")
    rundir.theirs(cfg, out, "[train] export_dir")
    if not os.path.lexists(out) or out == os.path.join(root, "export"):
        return
    if not os.path.isdir(out) or (os.listdir(out) and not os.path.lexists(os.path.join(out, EXPORT_MARK))):
        raise ConfigError(
            f"[train] export_dir {out} holds files hsx did not export (no {EXPORT_MARK}): "
            "the export would overwrite them; set a new or empty folder"
        )


def mark_export(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, EXPORT_MARK), "a"):
        pass


def trusted(path: str, what: str) -> str | None:
    """Why root should not run or unpickle what ``path`` holds (None: it may): the file and every
    folder above it belong to root or to this user and no one else may write them (a sticky
    folder such as /tmp excepted, where others cannot replace what is not theirs)."""
    me = {0, os.geteuid()}
    p = os.path.realpath(path)
    while True:
        try:
            st = os.lstat(p)
        except OSError as e:
            return f"{what} {path}: {p} cannot be read ({e.strerror})"
        if st.st_uid not in me:
            return f"{what} {path}: {p} belongs to uid {st.st_uid}, not to root or this user"
        sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        others = (
            st.st_mode & stat.S_IWOTH or st.st_mode & stat.S_IWGRP and st.st_gid != 0
        )  # root's group is root
        if others and not sticky:
            return f"{what} {path}: others may write {p} (mode {stat.S_IMODE(st.st_mode):o}): chmod go-w it"
        if p == "/":
            return None
        p = os.path.dirname(p)
