"""Append-only audit log of mutating actions: who, what, when, result (one JSON line each)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import threading

_lock = threading.Lock()
SLACK_ID_RE = re.compile(r"^[UW][A-Z0-9]{2,}$")


def mention(user: str) -> str:
    return f"<@{user}>" if SLACK_ID_RE.match(user) else user


class AuditLog:
    def __init__(self, path: str):
        if not path:
            raise ValueError("audit log path is empty")
        self.path = path

    def record(
        self, user: str, action: str, result: str, detail: str = "", now: dt.datetime | None = None
    ) -> str:
        """Append one record and return the line to show in the channel."""
        t = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
        entry = {
            "t": t.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "user": user,
            "action": action,
            "result": result,
            "detail": detail[:3000],  # a reply's length at most (Slack's block limit)
        }
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        with _lock:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            # O_APPEND keeps concurrent writers from interleaving inside a line.
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        return f"audit: {mention(user)} `{action}` → {result} at {t.strftime('%H:%M:%S UTC')}"

    def read(self) -> list[dict]:
        try:
            with open(self.path, encoding="utf-8") as f:
                return [json.loads(x) for x in f if x.strip()]
        except FileNotFoundError:
            return []
