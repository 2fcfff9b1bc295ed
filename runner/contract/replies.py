"""What ``hsx-runner`` answers: its exit codes, which of them each verb uses for an answer
(not a failure of the command), and the one shape of an action's JSON reply.

The runner exits with these and the ops side (``remote.client``) accepts them, so both read
them from here."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

OK = 0
NOT_OK = 1  # verify incomplete, preflight or the job failed; the reply says what
USAGE = 2  # usage or config error, on stderr
REFUSED = 3  # already running, not running, nothing to resume; the reply says why
# a file the verb reads on the box is broken (a status record, run.yaml): the box answered, and
# the reply names the file (``broken``) and says what to do; never a failed command or a dead box
BROKEN = 4

# hsx-runner logs|events -n, and the logs --which names; the ops side asks for at most
# MAX_LOG_LINES of a log (chat and hsx alike)
MAX_N = 5000
LOGS = ("runner", "server", "crash", "all")
MAX_LOG_LINES = 500
# a systemd service's name, as free-gpus names and stops it (hsx-runner preflight --units=a,b)
UNIT_NAME_RE = re.compile(r"[A-Za-z0-9@._:-]+\.service")

# hsx-runner exits with these for answers that are not failures of the command itself; a kind's
# (hsx-runner KIND ACTION): its KindSpec.codes (runner.contract.kinds)
ANSWER_CODES = {
    "status": (OK,),
    "start": (OK, REFUSED),  # refused (already running), reply says why
    "resume": (OK, REFUSED),
    "stop": (OK, REFUSED),
    "verify": (OK, NOT_OK, REFUSED),  # not every sample is sound, reply lists them; a background one refused
    "adopt": (OK, REFUSED),  # refused (bad directory, a runner holds the job), reply says why
    "compact": (OK, NOT_OK, REFUSED),  # some samples left as they were; refused: nothing changed
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


# --- the replies as the ops side reads them: one place knows each shape ---------------------
def _ints(x: Any) -> list[int]:
    return [i for i in x if isinstance(i, int) and not isinstance(i, bool)] if isinstance(x, list) else []


def _count(x: Any) -> int:
    """A field that is a list of indices in one reply and a count in another."""
    if isinstance(x, list):
        return len(x)
    return x if isinstance(x, int) and not isinstance(x, bool) else 0


@dataclass
class Answer:
    """An action's reply (start, resume, stop, adopt, free-gpus, a long verb put in the
    background): whether it was done, and the one message that says why or what."""

    ok: bool
    message: str = ""
    pid: int | None = None
    background: bool = False  # a long verb started detached: status shows it, the watcher posts its result
    started: bool = False
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Answer:
        refused = d.get("ok") is False or bool(d.get("refused"))
        pid = d.get("pid")
        return cls(
            ok=not refused,
            message=str(d.get("message") or d.get("reason") or d.get("error") or ""),
            pid=pid if isinstance(pid, int) else None,
            background=bool(d.get("background")),
            started=bool(d.get("started")),
            raw=d,
        )


@dataclass
class VerifyReport:
    """``hsx-runner verify --json``: counts of sound files and the indices of the rest."""

    total: int | None
    ok: int
    missing: list[int]
    corrupt: list[int]
    failed: list[int]
    unrecorded: list[int]
    repaired: int | None  # re-queued by --repair; None without it

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerifyReport:
        total = d.get("total")
        return cls(
            total=total if isinstance(total, int) and not isinstance(total, bool) else None,
            ok=_count(d.get("ok")),
            missing=_ints(d.get("missing")),
            corrupt=_ints(d.get("corrupt")),
            failed=_ints(d.get("failed")),
            unrecorded=_ints(d.get("unrecorded")),
            repaired=None if d.get("repaired") is None else _count(d.get("repaired")),
        )


@dataclass
class AdoptReport:
    """``hsx-runner adopt --json``: what was taken over and what was not, with reasons."""

    source: str
    adopted: int
    bad: dict[str, str]
    stray: int
    missing: int
    already: int
    loss_mask_differs: list[int]
    left: int = 0  # files not adopted in a foreign tree, reported and left in place

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AdoptReport:
        bad = d.get("bad") if isinstance(d.get("bad"), dict) else {}
        missing = d.get("missing_count", _count(d.get("missing")))
        return cls(
            source=str(d.get("source", "")),
            adopted=_count(d.get("adopted")),
            bad={str(k): str(v) for k, v in bad.items()},
            stray=_count(d.get("stray")),
            missing=missing if isinstance(missing, int) and not isinstance(missing, bool) else 0,
            already=_count(d.get("already")),
            loss_mask_differs=_ints(d.get("loss_mask_differs")),
            left=_count(d.get("left")),
        )


def _dicts(x: Any) -> list[dict]:
    return [d for d in x if isinstance(d, dict)] if isinstance(x, list) else []


@dataclass
class CompactReport:
    """``hsx-runner compact --json``: what was re-encoded, what it freed, what stayed and why."""

    storage: str
    mantissa_bits: int | None
    recoded: int
    already: int
    skipped: dict[str, str]
    bytes_before: int
    bytes_after: int
    freed: int
    pinned_bits: int | None  # the output's mantissa bits, rewritten once every sample was rounded

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompactReport:
        skipped = d.get("skipped") if isinstance(d.get("skipped"), dict) else {}
        bits, pinned = d.get("mantissa_bits"), d.get("pinned_bits")
        return cls(
            storage=str(d.get("storage", "")),
            mantissa_bits=bits if isinstance(bits, int) and not isinstance(bits, bool) else None,
            recoded=_count(d.get("recoded")),
            already=_count(d.get("already")),
            skipped={str(k): str(v) for k, v in skipped.items()},
            bytes_before=_count(d.get("bytes_before")),
            bytes_after=_count(d.get("bytes_after")),
            freed=_count(d.get("freed")),
            pinned_bits=pinned if isinstance(pinned, int) and not isinstance(pinned, bool) else None,
        )


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    fix: str = ""
    units: list[str] = field(default_factory=list)  # gpus: the systemd units that hold GPUs
    # gpus: who holds them, per unit or process {unit, pid, name, gpus, mib}, and what
    # stopping each unit did {unit, ok, detail}
    holders: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    refused: str = ""  # gpus: why free-gpus stopped nothing (its confirmation expired, the holders changed)


@dataclass
class PreflightReport:
    """``hsx-runner preflight --json``: every check, and whether a start would pass."""

    ok: bool
    checks: list[Check]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PreflightReport:
        checks = [
            Check(
                name=str(c.get("name", "")),
                ok=bool(c.get("ok")),
                detail=str(c.get("detail", "")),
                fix=str(c.get("fix") or ""),
                units=[str(u) for u in c["units"]] if isinstance(c.get("units"), list) else [],
                holders=_dicts(c.get("holders")),
                results=_dicts(c.get("results")),
                refused=str(c.get("refused") or ""),
            )
            for c in (d.get("checks") if isinstance(d.get("checks"), list) else [])
            if isinstance(c, dict)
        ]
        return cls(ok=bool(d.get("ok")), checks=checks)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)
