"""One root for every error hsx raises on purpose; messages are meant for a person."""


class HsxError(Exception):
    """Base of all deliberate hsx errors."""


class ConfigError(HsxError):
    """The config file is missing, malformed or inconsistent."""


class StatusError(HsxError):
    """A status record could not be read or is malformed."""


class BrokenFileError(StatusError):
    """A file hsx reads on the box (a status record, run.yaml) is there but broken: the runner
    exits BROKEN with its path and what to do, so the ops side never takes it for a dead box."""

    def __init__(self, path: str, why: str, fix: str):
        self.path, self.reason = path, f"{why}; {fix}"
        super().__init__(f"{path} is broken: {self.reason}")


class LockedError(HsxError):
    """Another runner holds the job's lock."""

    def __init__(self, pid: int | None, path: str):
        self.pid = pid
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"job is already running ({who} holds {path})")


class ServerError(HsxError):
    """The inference server failed to start, crashed, or failed its self-test."""


class ServerExited(ServerError):
    """The server process ended while starting: worth a (capped) restart, unlike a timeout."""


class JobFailed(HsxError):
    """The job stopped itself with a reason (consecutive failures, self-test, ...)."""
