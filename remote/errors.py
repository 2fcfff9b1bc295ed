"""Remote errors as a small typed hierarchy; the bot names the class in what it says."""

from __future__ import annotations

from runner.contract.errors import HsxError


class RemoteError(HsxError):
    """Root of everything that can go wrong reaching or driving the GPU box."""

    transient = False  # retried by remote.retry when True


class Unreachable(RemoteError):
    """A hop cannot be reached (refused, reset, timed out, EOF)."""

    transient = True

    def __init__(self, hop: str, detail: str):
        self.hop, self.detail = hop, detail
        super().__init__(f"unreachable ({hop}): {detail}")


class NoAnswer(RemoteError):
    """Nothing came back within a status answer's bound and no attempt has failed yet: a
    connect or a command still waits on the box."""

    transient = True

    def __init__(self, waited_s: float):
        self.waited_s = waited_s
        super().__init__(f"no reply within {waited_s:g}s: a connection or a command still waits on the box")


class AuthFailed(RemoteError):
    def __init__(self, hop: str, detail: str):
        self.hop, self.detail = hop, detail
        super().__init__(f"authentication failed ({hop}): {detail}")


class HostKeyMismatch(RemoteError):
    """Unknown or changed host key; never trusted automatically."""

    def __init__(self, hop: str, host: str, fingerprint: str, detail: str):
        self.hop, self.host, self.fingerprint = hop, host, fingerprint
        super().__init__(f"host key refused ({hop} {host}): {detail}; fingerprint {fingerprint}")


class CommandTimeout(RemoteError):
    """The command ran past its timeout on a connection that still answers. Not retried: a
    hung command would hang again, and the verb may not be safe to run twice."""

    def __init__(self, argv: list[str], timeout_s: float):
        self.argv, self.timeout_s = argv, timeout_s
        super().__init__(f"command timed out after {timeout_s:g}s: {argv[1] if len(argv) > 1 else argv}")


class CommandFailed(RemoteError):
    def __init__(self, argv: list[str], code: int, stderr: str):
        self.argv, self.code = argv, code
        self.stderr_tail = stderr.strip()[-800:]
        verb = argv[1] if len(argv) > 1 else argv[0]
        super().__init__(f"`hsx-runner {verb}` exited {code}: {self.stderr_tail or '(no stderr)'}")


class BadReply(RemoteError):
    """The runner answered, but not with the JSON the contract promises."""


class BrokenFile(BadReply):
    """The runner answered, exit BROKEN: a file it reads on the box (a status record, run.yaml)
    is broken. Not retried, and never taken for an unreachable box: the box is there."""

    def __init__(self, verb: str, file: str | None, reason: str, message: str):
        self.verb, self.file, self.reason, self.message = verb, file, reason, message
        super().__init__(f"`hsx-runner {verb}`: {message}")
