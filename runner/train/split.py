"""The held-out split (``[train] eval_samples = N``): N samples for SpecForge's eval, the rest to
train on, as two trees of links in the run dir, ``features/`` and ``eval/``.

SpecForge's offline reader walks ``data.hidden_states_path`` recursively and trains on every
``.ckpt`` / ``.ckpt.gz`` below it, so the held-out files must live outside that tree: each tree
mirrors the output's layout with a link per sample file (real folders, linked files: the walk
does not follow linked folders, and its reader and vocab pass open a linked file as the file).

The choice is the N files whose sha256 of ``"{seed}:{path under out}"`` is smallest: fixed by
``[train] seed`` and the file names alone (not their order, not Python's random module), and
spread over the whole dataset, where the last N would be one slice of however it was sorted.
It is written into ``split.json`` at a start and never rewritten by a resume: SpecForge's resume
counts the training files, and the model has seen exactly those.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from ..contract.atomic import write_atomic
from ..contract.errors import ConfigError

SUFFIXES = (".ckpt", ".ckpt.gz")  # what SpecForge's offline reader takes as a sample
TRAIN, EVAL, NAME = "features", "eval", "split.json"


def sample_files(out: str) -> list[str]:
    """Every sample file below ``out``, as a path relative to it, sorted."""
    found = []
    for d, _, names in os.walk(out):
        found += [os.path.relpath(os.path.join(d, n), out) for n in names if n.endswith(SUFFIXES)]
    return sorted(found)


def choose(files: list[str], n: int, seed: int) -> list[str]:
    """The ``n`` held-out files, sorted."""
    key = lambda rel: hashlib.sha256(f"{seed}:{rel}".encode()).hexdigest()  # noqa: E731
    return sorted(sorted(files, key=key)[:n])


def _link_tree(out: str, files: list[str], dest: str) -> None:
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
        os.symlink(os.path.join(out, rel), os.path.join(tmp, rel))
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)


def _links_only(dest: str) -> bool:
    """``dest`` is absent or one of hsx's link trees (real folders, linked files): safe to replace."""
    if os.path.islink(dest) or os.path.lexists(dest) and not os.path.isdir(dest):
        return False
    for d, dirs, names in os.walk(dest):
        if any(os.path.islink(os.path.join(d, n)) for n in dirs):
            return False
        if not all(os.path.islink(os.path.join(d, n)) for n in names):
            return False
    return True


def write(out: str, root: str, n: int, seed: int) -> dict:
    """Split the output's samples for a first start: ``split.json`` and the two trees in
    ``root``. Refuses (ConfigError) when no sample would be left to train on."""
    out = os.path.abspath(out)
    for dest in (os.path.join(root, TRAIN), os.path.join(root, EVAL)):
        if not _links_only(dest):  # only hsx's own link trees are replaced
            raise ConfigError(
                f"{dest} holds files hsx did not link there: move them, or set another [train] run_dir"
            )
    files = sample_files(out)
    if not files:
        raise ConfigError(f"no feature files under {out}: extract first")
    if n >= len(files):
        raise ConfigError(
            f"[train] eval_samples = {n} holds out every sample ({out} has {len(files)}): "
            f"set it below {len(files)}, or 0 for no eval"
        )
    held = choose(files, n, seed)
    chosen = set(held)
    train = [f for f in files if f not in chosen]
    _link_tree(out, train, os.path.join(root, TRAIN))
    _link_tree(out, held, os.path.join(root, EVAL))
    split = {"out": out, "seed": seed, "eval_samples": n, "eval": held, "train": train}
    write_atomic(os.path.join(root, NAME), json.dumps(split, indent=1) + "\n", 0o644)
    return split
