"""What ``hsx-runner`` answers: its exit codes, which of them each verb uses for an answer
(not a failure of the command), and the one shape of an action's JSON reply.

The runner exits with these and the ops side (``remote.client``) accepts them, so both read
them from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OK = 0
NOT_OK = 1  # verify incomplete, preflight or the job failed; the reply says what
USAGE = 2  # usage or config error, on stderr
REFUSED = 3  # already running, not running, nothing to resume; the reply says why

# hsx-runner exits with these for answers that are not failures of the command itself.
ANSWER_CODES = {
    "status": (OK,),
    "start": (OK, REFUSED),  # refused (already running), reply says why
    "resume": (OK, REFUSED),
    "stop": (OK, REFUSED),
    "verify": (OK, NOT_OK, REFUSED),  # not every sample is sound, reply lists them; a background one refused
    "adopt": (OK, REFUSED),  # refused (bad directory, a runner holds the job), reply says why
    "logs": (OK,),
    "events": (OK,),
    "preflight": (OK, NOT_OK),  # some check failed, reply lists them
}


@dataclass
class Reply:
    """One verb's answer: the JSON object, the text a person reads, the exit code."""

    obj: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    code: int = OK

    def payload(self) -> dict[str, Any]:
        """An action (start, resume, stop) always says ``ok`` and ``message``, so the ops side
        reads every action's reply the same way."""
        obj = self.obj
        if "started" in obj or "stopped" in obj:
            return {"ok": bool(obj.get("started", obj.get("stopped"))), **obj, "message": self.text}
        return obj
