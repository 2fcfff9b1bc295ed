"""The GPU-box client: one fixed ``hsx-runner`` verb per method, arguments validated,
replies parsed into typed records. No text from chat ever becomes part of a command."""

from __future__ import annotations

import json
from typing import Any

from runner.contract.kinds import KINDS
from runner.contract.regenerate import RegenerateRecord
from runner.contract.replies import ANSWER_CODES, BROKEN, LOGS, MAX_LOG_LINES, MAX_N, UNIT_NAME_RE
from runner.contract.status import StatusRecord
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


READS = ("status", "history", "logs", "events")  # a verb or a kind's action that changes nothing


def changes(verb: str, args: tuple[str, ...]) -> bool:
    """Whether the command changes the box, so that it is never sent twice (remote/ssh.py)."""
    if verb in READS or (verb in KINDS and args[:1] and args[0] in READS):
        return False
    if verb in ("verify", "preflight"):
        return "--repair" in args or "--free-gpus" in args
    return True


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
        res: Result = self.transport.run(argv, timeout_s or self.timeout_s, once=changes(verb, args))
        if res.code == BROKEN:
            raise _broken(verb, res)
        if res.code not in (ANSWER_CODES.get(verb) or KINDS[verb].codes):
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

    def call(self, kind: str, action: str) -> dict[str, Any]:
        """``hsx-runner KIND ACTION``: a kind and an action of the fixed table (runner.contract.kinds);
        the long ones wait as long as the table says."""
        k = KINDS[kind]
        return self._call(k.name, k.check(action), timeout_s=k.timeout_s(action, self.timeout_s))

    def record(self, kind: str) -> Any:
        """The kind's status, typed (a pipeline's: its record, each stage's phase, the stage
        under way's own status reply)."""
        return self._typed(KINDS[kind].record, self.call(kind, "status"))

    @staticmethod
    def _typed(parse, reply: dict[str, Any]) -> Any:
        from runner.contract.errors import StatusError

        try:
            return parse(reply)
        except StatusError as e:
            raise BadReply(str(e)) from None

    def train_history(self) -> dict[str, list[dict]]:
        """Every logged step's loss and acc, the evals and the launch events (`/train chart`)."""
        from runner.contract.train_history import parse_history

        return self._typed(parse_history, self.call("train", "history"))

    def regenerate_history(self) -> tuple[RegenerateRecord, list[dict]]:
        """The record and its progress points (`/regenerate chart`), from one status reply; each
        point's fields are checked where it is drawn."""
        reply = self.call("regenerate", "status")
        rec = self._typed(RegenerateRecord.from_dict, reply)
        points = reply.get("history", [])
        if not isinstance(points, list):
            raise BadReply("`hsx-runner regenerate status` reply's 'history' is not a list")
        return rec, [p for p in points if isinstance(p, dict)]

    def close(self) -> None:
        self.transport.close()
