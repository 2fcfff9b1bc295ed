"""The engine every way of running the job shares: the verbs' names, and the reads (logs,
events, whether there is anything to resume) that are the same wherever the job runs."""

from __future__ import annotations

import os

from ..contract.atomic import json_objects
from ..contract.config import Config
from ..contract.replies import Reply
from ..contract.status import StatusRecord
from ..job import view
from ..output.ranks import RunPaths
from ..output.store import DESCRIPTION


class Engine:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.out = cfg.job.out

    def start(self, force: bool = False) -> Reply:
        raise NotImplementedError

    def resume(self, force: bool = False) -> Reply:
        raise NotImplementedError

    def stop(self, wait: float) -> Reply:
        raise NotImplementedError

    def status(self) -> StatusRecord:
        raise NotImplementedError

    def nothing_to_resume(self) -> str | None:
        """Why resume has nothing to continue (no output was ever set up), or None."""
        if os.path.exists(os.path.join(self.out, DESCRIPTION)):
            return None
        return f"nothing to resume in {self.out}; use start"

    def logs(self, n: int, which: str = "runner", rank: int | None = None, server: bool = False) -> Reply:
        """One run's log tail (a rank's, with ``rank``); ``which`` all: a short tail of each."""
        paths = RunPaths(self.out, rank)
        logs = {"runner": paths.runner_log, "server": paths.server_log, "crash": paths.crash_log}
        which = "server" if server else which
        if which != "all":
            lines = view.tail(logs[which], n)
            return Reply({"path": logs[which], "lines": lines}, "\n".join(lines))
        lines = []  # a short tail of each, under its name; empty ones left out
        for name, path in logs.items():
            part = view.tail(path, n)
            if part:
                lines += [f"--- {name}: {os.path.basename(path)} ---", *part]
        return Reply({"path": os.path.dirname(paths.runner_log), "lines": lines}, "\n".join(lines))

    def events(self, n: int) -> Reply:
        """The last ``n`` events, parsed; a torn line is left out."""
        lines = self.event_lines(n)
        return Reply({"events": json_objects(lines)}, "\n".join(lines))

    def event_lines(self, n: int) -> list[str]:
        return view.tail(RunPaths(self.out).events, n)
