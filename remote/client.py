"""The GPU-box client: one fixed ``hsx-runner`` verb per method, arguments validated,
replies parsed into typed records. No text from chat ever becomes part of a command."""

from __future__ import annotations

import json
from typing import Any

from runner.contract.measure import ACTIONS as MEASURE_ACTIONS
from runner.contract.measure import MeasureRecord
from runner.contract.pipeline import ACTIONS as PIPELINE_ACTIONS
from runner.contract.pipeline import PipelineRecord
from runner.contract.regenerate import ACTIONS as REGENERATE_ACTIONS
from runner.contract.regenerate import RegenerateRecord
from runner.contract.replies import ANSWER_CODES, BROKEN, LOGS, MAX_LOG_LINES, MAX_N, UNIT_NAME_RE
from runner.contract.status import StatusRecord
from runner.contract.train import ACTIONS as TRAIN_ACTIONS
from runner.contract.train import TrainRecord
from runner.text.extraction import MAX_ERROR_CHARS

from .errors import BadReply, BrokenFile, CommandFailed
from .transport import Result, Transport

MAX_PATH_CHARS = 4096


def check_adopt_dir(path: object) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"adopt: the directory must be an absolute path on the GPU box, got {path!r}")
    if len(path) > MAX_PATH_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ValueError("adopt: the directory name is too long or holds NUL, newline or control characters")
    return path


def _broken(verb: str, res: Result) -> BrokenFile:
    """The runner's BROKEN answer: its JSON names the file; its stderr says it where the JSON
    did not come."""
    said = res.stderr.strip().removeprefix("hsx-runner: ")[-MAX_ERROR_CHARS:] or "(no message)"
    try:
        reply = json.loads(res.stdout)
    except (ValueError, RecursionError):
        reply = None
    if not isinstance(reply, dict):
        return BrokenFile(verb, None, said, said)
    file, reason, message = (str(reply.get(k) or "") for k in ("broken", "reason", "message"))
    return BrokenFile(verb, file[:MAX_PATH_CHARS] or None, reason[:MAX_ERROR_CHARS] or said,
                      message[: MAX_PATH_CHARS + MAX_ERROR_CHARS] or said)  # fmt: skip


def pipeline_reply(d: Any) -> dict[str, Any]:
    """``pipeline status``'s reply, checked and kept as given: its record's fields as
    PipelineRecord reads them, ``phases`` (stage: phase) an object of strings, ``current`` (the
    stage under way's own status reply) an object or null. A StatusError says what is wrong."""
    from runner.contract.errors import StatusError

    PipelineRecord.from_dict(d)
    phases = d.get("phases", {})
    if not isinstance(phases, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in phases.items()
    ):
        raise StatusError("pipeline status reply's 'phases' is not an object of stage: phase")
    if d.get("current") is not None and not isinstance(d["current"], dict):
        raise StatusError("pipeline status reply's 'current' is not an object or null")
    return d


class GpuBox:
    def __init__(self, transport: Transport, runner: str, runner_config: str, timeout_s: float = 60.0):
        self.transport = transport
        self.runner = runner
        self.runner_config = runner_config
        self.timeout_s = timeout_s

    def _call(self, verb: str, *args: str, timeout_s: float | None = None) -> dict[str, Any]:
        argv = [self.runner, verb, "--json"]
        if self.runner_config:
            argv += ["--config", self.runner_config]
        argv += list(args)
        res: Result = self.transport.run(argv, timeout_s or self.timeout_s)
        if res.code == BROKEN:
            raise _broken(verb, res)
        if res.code not in ANSWER_CODES[verb]:
            raise CommandFailed(argv, res.code, res.stderr or res.stdout)
        try:
            reply = json.loads(res.stdout)
        except json.JSONDecodeError:
            raise BadReply(f"`hsx-runner {verb}` did not answer JSON: {res.stdout[-300:]!r}") from None
        if not isinstance(reply, dict):
            raise BadReply(f"`hsx-runner {verb}` answered {type(reply).__name__}, not an object")
        return reply

    def status(self) -> StatusRecord:
        from runner.contract.errors import StatusError

        reply = self._call("status")
        try:
            return StatusRecord.from_dict(reply)
        except StatusError as e:
            raise BadReply(str(e)) from None

    def start(self, force: bool = False) -> dict[str, Any]:
        return self._call("start", *(["--force"] if force else []), timeout_s=max(self.timeout_s, 600.0))

    def resume(self, force: bool = False) -> dict[str, Any]:
        return self._call("resume", *(["--force"] if force else []), timeout_s=max(self.timeout_s, 600.0))

    def stop(self) -> dict[str, Any]:
        return self._call("stop")

    def verify(self, repair: bool = False, quick: bool = False, background: bool = False) -> dict[str, Any]:
        """The report; with ``background``, the answer to starting it detached (status shows its
        progress, and the watcher posts its result)."""
        args = (
            (["--repair"] if repair else [])
            + (["--quick"] if quick else [])
            + (["--background"] if background else [])
        )
        return self._call("verify", *args, timeout_s=max(self.timeout_s, 3600.0))

    def adopt(self, path: str, background: bool = False) -> dict[str, Any]:
        """Take over another tool's output in ``path`` (a directory on the GPU box): one argv
        element, absolute, printable; it never passes through a shell."""
        check_adopt_dir(path)
        return self._call("adopt", *(["--background"] if background else []), path,
                          timeout_s=max(self.timeout_s, 3600.0))  # fmt: skip

    def compact(self, background: bool = False) -> dict[str, Any]:
        """Re-encode the output in place to the job's storage; with ``background``, the answer to
        starting it detached (status shows its progress and the space freed)."""
        return self._call("compact", *(["--background"] if background else []),
                          timeout_s=max(self.timeout_s, 3600.0))  # fmt: skip

    def logs(self, n: int = 20, which: str = "runner") -> list[str]:
        """The last ``n`` lines of the runner's log, the server's, the crash output, or of all."""
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_LOG_LINES:
            raise ValueError(f"logs: n must be an integer 1..{MAX_LOG_LINES}")
        if which not in LOGS:
            raise ValueError(f"logs: which must be one of {', '.join(LOGS)}")
        reply = self._call("logs", "-n", str(n), "--which", which)
        lines = reply.get("lines")
        if not isinstance(lines, list):
            raise BadReply("`hsx-runner logs` reply has no 'lines' list")
        return [str(x) for x in lines]

    def events(self, n: int = 2000) -> list[dict]:
        """Recent runner events (phases, milestones, progress points) for charts."""
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_N:
            raise ValueError(f"events: n must be an integer 1..{MAX_N}")
        events = self._call("events", "-n", str(n)).get("events")
        if not isinstance(events, list):
            raise BadReply("`hsx-runner events` reply has no 'events' list")
        return [e for e in events if isinstance(e, dict)]

    def preflight(
        self, free_gpus: bool = False, units: list[str] | None = None, until: float | None = None
    ) -> dict[str, Any]:
        """With ``units`` and ``until`` (a confirmation), the box stops nothing unless exactly
        those units hold the GPUs and ``until`` has not passed."""
        args = ["--free-gpus"] if free_gpus else []
        if units is not None or until is not None:
            if (
                not free_gpus
                or until is None
                or not units
                or not all(isinstance(u, str) and UNIT_NAME_RE.fullmatch(u) for u in units)
            ):
                raise ValueError(f"free-gpus: a confirmation needs unit names and an expiry, got {units!r}")
            args += [f"--units={','.join(units)}", f"--until={int(until)}"]
        return self._call("preflight", *args, timeout_s=max(self.timeout_s, 600.0))

    def train(self, action: str) -> dict[str, Any]:
        """``hsx-runner train ACTION``: one of a fixed set; start, resume and export wait long
        (the start checks the trainer's interpreter; export runs SpecForge's exporter)."""
        if action not in TRAIN_ACTIONS:
            raise ValueError(f"train: the action must be one of {', '.join(TRAIN_ACTIONS)}, got {action!r}")
        long = action in ("setup", "start", "resume", "export")
        return self._call("train", action, timeout_s=max(self.timeout_s, 1800.0 if long else 0.0))

    def train_status(self) -> TrainRecord:
        from runner.contract.errors import StatusError

        try:
            return TrainRecord.from_dict(self.train("status"))
        except StatusError as e:
            raise BadReply(str(e)) from None

    def train_history(self) -> dict[str, list[dict]]:
        """Every logged step's loss and acc, the evals and the launch events (`/train chart`)."""
        from runner.contract.errors import StatusError
        from runner.contract.train_history import parse_history

        try:
            return parse_history(self.train("history"))
        except StatusError as e:
            raise BadReply(str(e)) from None

    def measure(self, action: str) -> dict[str, Any]:
        """``hsx-runner measure ACTION``: one of a fixed set; start and resume wait for the
        measuring supervisor to claim its run."""
        if action not in MEASURE_ACTIONS:
            raise ValueError(
                f"measure: the action must be one of {', '.join(MEASURE_ACTIONS)}, got {action!r}"
            )
        long = action in ("start", "resume")
        return self._call("measure", action, timeout_s=max(self.timeout_s, 600.0 if long else 0.0))

    def measure_status(self) -> MeasureRecord:
        from runner.contract.errors import StatusError

        try:
            return MeasureRecord.from_dict(self.measure("status"))
        except StatusError as e:
            raise BadReply(str(e)) from None

    def regenerate(self, action: str) -> dict[str, Any]:
        """``hsx-runner regenerate ACTION``: one of a fixed set; start and resume wait for the
        regenerating supervisor to claim its run."""
        if action not in REGENERATE_ACTIONS:
            raise ValueError(
                f"regenerate: the action must be one of {', '.join(REGENERATE_ACTIONS)}, got {action!r}"
            )
        long = action in ("start", "resume")
        return self._call("regenerate", action, timeout_s=max(self.timeout_s, 600.0 if long else 0.0))

    def regenerate_status(self) -> RegenerateRecord:
        return self.regenerate_history()[0]

    def regenerate_history(self) -> tuple[RegenerateRecord, list[dict]]:
        """The record and its progress points (`/regenerate chart`), from one status reply; each
        point's fields are checked where it is drawn."""
        from runner.contract.errors import StatusError

        reply = self.regenerate("status")
        try:
            rec = RegenerateRecord.from_dict(reply)
        except StatusError as e:
            raise BadReply(str(e)) from None
        points = reply.get("history", [])
        if not isinstance(points, list):
            raise BadReply("`hsx-runner regenerate status` reply's 'history' is not a list")
        return rec, [p for p in points if isinstance(p, dict)]

    def pipeline(self, action: str) -> dict[str, Any]:
        """``hsx-runner pipeline ACTION``: one of a fixed set; start (which also resumes a
        pipeline that ended short) waits for the pipeline's supervisor to claim its run."""
        if action not in PIPELINE_ACTIONS:
            raise ValueError(
                f"pipeline: the action must be one of {', '.join(PIPELINE_ACTIONS)}, got {action!r}"
            )
        long = action == "start"
        return self._call("pipeline", action, timeout_s=max(self.timeout_s, 600.0 if long else 0.0))

    def pipeline_status(self) -> dict[str, Any]:
        """The pipeline's record with each stage's phase (``phases``) and the stage under way's
        own status reply (``current``), checked (``pipeline_reply``)."""
        from runner.contract.errors import StatusError

        try:
            return pipeline_reply(self.pipeline("status"))
        except StatusError as e:
            raise BadReply(str(e)) from None

    def close(self) -> None:
        self.transport.close()
