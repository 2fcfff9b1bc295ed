"""Append-only audit log of mutating actions: who, what, when, result (one JSON line each).

An action is written twice: the attempt before it starts, then its outcome with the same id,
so a bot that dies mid-action still leaves the attempt on record.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import threading
import uuid

from bot.render.mrkdwn import escape
from runner.contract.atomic import read_jsonl, torn
from runner.text.training import WITHHELD

_lock = threading.Lock()
SLACK_ID_RE = re.compile(r"^[UW][A-Z0-9]{2,}$")
_PLACE = re.compile(r"\s+(?:into|to|in|at|from)\s+~?/[^\s\"'`)\]]*")  # "… into /data/x.jsonl"
_PATH = re.compile(r"(?<![\w.~/-])~?/[^\s\"'`)\]]*")  # a path of the box, not "3/1/4" or "rows/s"


def without_paths(said: str) -> str:
    """What the box said as the channel reads it: "62 rows regenerated", not where to; any other
    path of the box as "…" (members' texts withhold them; operators get them by themselves)."""
    return _PATH.sub("…", _PLACE.sub("", said))


def mention(user: str) -> str:
    return f"<@{user}>" if SLACK_ID_RE.match(user) else escape(user)


def ask_operators(operators) -> str:
    """``WITHHELD`` with the operators named, as mrkdwn (a member's answer says whom to ask)."""
    who = ", ".join(mention(u) for u in operators)
    return WITHHELD.replace("an operator", f"an operator ({who})") if who else WITHHELD


def for_member(text: str, full: bool, operators) -> tuple[str, bool]:
    """(text, markup): a member's text that withholds something names whom to ask, escaped here
    since it carries mentions; an operator's, or one withholding nothing, as it is."""
    if full or WITHHELD not in text:
        return text, False
    return escape(text).replace(WITHHELD, ask_operators(operators)), True


class AuditLog:
    def __init__(self, path: str):
        if not path:
            raise ValueError("audit log path is empty")
        self.path = path

    def attempt(self, user: str, action: str) -> str:
        """Record that user is about to run action; the id its outcome's record() carries."""
        ref = uuid.uuid4().hex[:12]
        self._append(self._entry(dt.datetime.now(dt.timezone.utc), user, action, "attempt", "", ref))
        return ref

    def record(
        self, user: str, action: str, result: str, detail: str = "", now: dt.datetime | None = None,
        ref: str = "",
    ) -> str:  # fmt: skip
        """Append one record (an outcome of attempt ref, or a refusal) and return the line to
        show in the channel."""
        t = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
        self._append(self._entry(t, user, action, result, detail, ref))
        return f"audit: {mention(user)} `{action}` → {result} at {t.strftime('%H:%M:%S UTC')}"

    @staticmethod
    def _entry(t: dt.datetime, user: str, action: str, result: str, detail: str, ref: str) -> dict:
        entry = {
            "t": t.astimezone(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "user": user,
            "action": action,
            "result": result,
            "detail": detail[:3000],  # a reply's length at most (Slack's block limit)
        }
        return {**entry, "id": ref} if ref else entry

    def _append(self, entry: dict) -> None:
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        with _lock:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            # O_APPEND keeps concurrent writers from interleaving inside a line.
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
            try:
                if torn(self.path):  # a crash mid-write: end that line, or this entry joins it
                    line = "\n" + line
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def read(self) -> list[dict]:
        """Its entries; a line torn by a crash mid-write is passed over, never raised."""
        return read_jsonl(self.path)
