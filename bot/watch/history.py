"""Where `chart` gets its progress points.

Ops-side history: the watcher appends one ``{"t", "done", "rate"}`` line per poll to a local
JSONL file. A box whose client offers ``events()`` is asked for the runner's events; else, when
the GPU box is this machine, its ``<out>/events.jsonl`` is read.
"""

from __future__ import annotations

import json
import os

from runner.contract.atomic import read_jsonl
from runner.contract.config import Config
from runner.contract.replies import MAX_N
from runner.contract.status import StatusRecord, now_iso

MAX_LINES = 20000


def state_path(cfg: Config, suffix: str = "") -> str:
    """The watcher's state file (``[watcher] state_file``, or hsx-watch.json beside the config);
    with ``suffix``, a file of its own beside it: the history, the last records seen."""
    base = cfg.watcher.state_file or os.path.join(
        os.path.dirname(os.path.abspath(cfg.path or ".")), "hsx-watch.json"
    )
    return os.path.splitext(base)[0] + suffix if suffix else base


def history_path(cfg: Config) -> str:
    return state_path(cfg, ".history.jsonl")


def append(cfg: Config, rec: StatusRecord) -> None:
    line = json.dumps({"t": rec.heartbeat_at or now_iso(), "done": rec.done, "rate": rec.rate})
    path = history_path(cfg)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def events(cfg: Config, box=None) -> list[dict]:
    got = []
    if box is not None and callable(getattr(box, "events", None)):
        got += box.events(MAX_N)  # a progress point a minute: ~3.5 days of them
    elif cfg.remote.transport == "local" and cfg.job.out:  # the same file, not read twice
        got += read_jsonl(os.path.join(cfg.job.out, "events.jsonl"), MAX_LINES)
    got += read_jsonl(history_path(cfg), MAX_LINES)
    return got
