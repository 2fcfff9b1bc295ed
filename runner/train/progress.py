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
from ..contract.train import MAX_STEP

# a step dict holds numbers and lists of them, never a brace: found anywhere in a line, since
# two ranks' prints can share one (print writes the text and its newline apart). ASCII digits
# only; a sign is matched so that a negative step is seen, and refused, rather than passed over.
STEP_RE = re.compile(r"step ([-+]?[0-9]+): (\{[^{}]*\})")
CKPT_RE = re.compile(r"-step([0-9]{1,13})\Z")  # the whole name: no trailing newline, no 10**400
STATE = "training_state.pt"
MAX_LINE = 64 << 10  # a step line is a few hundred bytes: a longer one is counted, never parsed
_DIGITS = len(str(MAX_STEP))
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


def _step(raw: str) -> int | None:
    """A step's digits as an int within 0..MAX_STEP, else None (never int() of 5,000 digits)."""
    if len(raw.lstrip("+-").lstrip("0")) > _DIGITS:
        return None
    step = int(raw)
    return step if 0 <= step <= MAX_STEP else None


def _clip(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else f"{text[:12]}… ({len(text):,} characters)"


def scan(line: str) -> tuple[list[tuple[int, dict]], str | None]:
    """(step, metrics) of each ``step N: {...}`` in a line, and why the last one that could not
    be used was not (None: every one was). Whatever the line holds, it raises nothing."""
    if len(line) > MAX_LINE:
        return [], f"{len(line):,} characters, over the {MAX_LINE >> 10} KiB a step line may have: not read"
    out, bad = [], None
    for m in STEP_RE.finditer(line):
        step = _step(m.group(1))
        if step is None:
            bad = f"step {_clip(m.group(1))} is not 0..{MAX_STEP:,}"
            continue
        try:
            d = _value(ast.parse(m.group(2), mode="eval").body)
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as e:
            bad = f"step {step}: its metrics are not plain values ({type(e).__name__})"
            continue
        if isinstance(d, dict):  # a tracker's train/ keys are the plain ones
            out.append(
                (step, {k.removeprefix("train/") if isinstance(k, str) else k: v for k, v in d.items()})
            )
    return out, bad


def parse_steps(line: str) -> list[tuple[int, dict]]:
    """(step, metrics) of each ``step N: {...}`` in a line; a malformed one is left out."""
    return scan(line)[0]


def parse_step(line: str) -> tuple[int, dict] | None:
    """The first step line's (step, metrics) in a line, else None."""
    got = parse_steps(line)
    return got[0] if got else None


def is_eval(metrics: dict) -> bool:
    return any(isinstance(k, str) and k.startswith("eval/") for k in metrics)


class StepLines:
    """A launch's step and eval lines, each once: every rank prints every line, and the copies
    agree (SpecForge all-reduces the metrics before it logs), so the first copy of a step counts;
    an eval's line may share a training line's step.

    A line it cannot use (a step out of bounds, metrics that do not parse, a line over MAX_LINE)
    is counted in ``bad`` and named in ``bad_line`` by its number (``first`` is the first line's)
    and what was wrong, never by its text. ``take`` reads the log's bytes as they come: a partial
    last line waits for its newline, and past MAX_LINE is no longer kept, only measured."""

    def __init__(self, first: int = 1):
        self.last = {"step": 0, "eval": 0}
        self.line = first - 1  # the number of the line fed last
        self.bad = 0
        self.bad_line: str | None = None
        self._buf = b""
        self._over = 0  # the bytes so far of a partial line past MAX_LINE, dropped as they come

    def _bad(self, why: str) -> None:
        self.bad += 1
        self.bad_line = f"line {self.line:,}: {why}"

    def feed(self, line: str) -> list[tuple[int, dict]]:
        self.line += 1
        found, why = scan(line)
        if why:
            self._bad(why)
        out = []
        for step, m in found:
            kind = "eval" if is_eval(m) else "step"
            if step > self.last[kind]:
                self.last[kind] = step
                out.append((step, m))
        return out

    def _whole(self, raw: bytes) -> list[tuple[int, dict]]:
        if self._over or len(raw) > MAX_LINE:
            self.line += 1
            self._bad(
                f"{self._over + len(raw):,} bytes, over the {MAX_LINE >> 10} KiB a step line may have: not read"
            )
            self._over = 0
            return []
        return self.feed(raw.decode("utf-8", "replace"))

    def take(self, chunk: bytes) -> list[tuple[int, dict]]:
        """The steps of the lines this chunk of the log completes."""
        *lines, rest = chunk.split(b"\n")
        out = []
        for raw in lines:
            out += self._whole(self._buf + raw)
            self._buf = b""
        if self._over or len(self._buf) + len(rest) > MAX_LINE:
            self._over, self._buf = self._over + len(self._buf) + len(rest), b""
        else:
            self._buf += rest
        return out

    def end(self) -> list[tuple[int, dict]]:
        """The steps of a last line that never got its newline (the trainer has ended)."""
        if not self._buf and not self._over:
            return []
        raw, self._buf = self._buf, b""
        return self._whole(raw)


def number(x) -> float | None:
    """A metric as a float for JSON: None for a missing one, one that is not a number, or one no
    float holds (a 400-digit integer); nan and inf as strings would not round-trip, so they are
    None here and the raw line keeps them."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


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
