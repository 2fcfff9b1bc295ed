"""What the trainer leaves: its ``step N: {...}`` lines and its checkpoint folders.

A step line's dict is a Python literal with bare ``nan``/``inf`` possible: parsed by walking
its syntax tree, never evaluated. An eval is a line of the same form whose keys are ``eval/*``
(``eval/avg_acc``, ``eval/simulated_acc_len``, ...); with a tracker on, SpecForge prints the
training's keys as ``train/*``, read here as the plain names. A checkpoint counts once ``training_state.pt`` and every
rank's file are there and no ``.tmp`` is (rank 0 writes the shared file before the others
finish); hsx then fsyncs it, since SpecForge fsyncs nothing.
"""

from __future__ import annotations

import ast
import math
import os
import re

from ..contract.atomic import fsync_path

# a step dict holds numbers and lists of them, never a brace: found anywhere in a line, since
# two ranks' prints can share one (print writes the text and its newline apart)
STEP_RE = re.compile(r"step (\d+): (\{[^{}]*\})")
CKPT_RE = re.compile(r"-step(\d+)$")
STATE = "training_state.pt"
_NAMES = {"nan": math.nan, "inf": math.inf, "True": True, "False": False, "None": None}


def _value(node: ast.AST):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    raise ValueError(f"not a plain value: {ast.dump(node)[:60]}")


def parse_steps(line: str) -> list[tuple[int, dict]]:
    """(step, metrics) of each ``step N: {...}`` in a line; a malformed one is left out."""
    out = []
    for m in STEP_RE.finditer(line):
        try:
            d = _value(ast.parse(m.group(2), mode="eval").body)
        except (SyntaxError, ValueError, RecursionError):
            continue
        if isinstance(d, dict):  # a tracker's train/ keys are the plain ones
            out.append(
                (
                    int(m.group(1)),
                    {k.removeprefix("train/") if isinstance(k, str) else k: v for k, v in d.items()},
                )
            )
    return out


def parse_step(line: str) -> tuple[int, dict] | None:
    """The first step line's (step, metrics) in a line, else None."""
    got = parse_steps(line)
    return got[0] if got else None


def is_eval(metrics: dict) -> bool:
    return any(isinstance(k, str) and k.startswith("eval/") for k in metrics)


class StepLines:
    """A launch's step and eval lines, each once: every rank prints every line, and the copies
    agree (SpecForge all-reduces the metrics before it logs), so the first copy of a step counts;
    an eval's line may share a training line's step."""

    def __init__(self):
        self.last = {"step": 0, "eval": 0}

    def feed(self, line: str) -> list[tuple[int, dict]]:
        out = []
        for step, m in parse_steps(line):
            kind = "eval" if is_eval(m) else "step"
            if step > self.last[kind]:
                self.last[kind] = step
                out.append((step, m))
        return out


def number(x) -> float | None:
    """A metric as a float for JSON: None for a missing one; nan and inf as strings would not
    round-trip, so they are None here and the raw line keeps them."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def complete(step_dir: str, world: int) -> bool:
    try:
        names = set(os.listdir(step_dir))
    except OSError:
        return False
    if any(".tmp" in n for n in names):
        return False
    return STATE in names and all(f"training_state_rank{r}.pt" in names for r in range(world))


def checkpoints(output: str, run_id: str) -> list[int]:
    """Steps of the ``{run_id}-step{N}`` folders there, complete or not, ascending."""
    try:
        names = os.listdir(output)
    except OSError:
        return []
    steps = []
    for n in names:
        m = CKPT_RE.search(n)
        if n.startswith(run_id + "-step") and m and os.path.isdir(os.path.join(output, n)):
            steps.append(int(m.group(1)))
    return sorted(steps)


def step_dir(output: str, run_id: str, step: int) -> str:
    return os.path.join(output, f"{run_id}-step{step}")


def durable(output: str, run_id: str, world: int, synced: set[int]) -> int | None:
    """The last complete checkpoint, fsynced here the first time it is seen complete (its
    files, its folder, the run's folder); ``synced`` remembers which were."""
    best = None
    for step in checkpoints(output, run_id):
        d = step_dir(output, run_id, step)
        if not complete(d, world):
            continue
        if step not in synced:
            try:
                for n in os.listdir(d):
                    fsync_path(os.path.join(d, n))
                fsync_path(d)
                fsync_path(output)
            except OSError:
                continue  # rotated away while we looked
            synced.add(step)
        best = step
    return best
