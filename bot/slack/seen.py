"""A small persisted set of ids already acted on (Slack event ids, used buttons).

Slack re-delivers an event it thinks was missed (X-Slack-Retry-Num, same event_id), and a
button can be clicked twice; both must act once, also across a bot restart.
"""

from __future__ import annotations

import json
import os
import threading

from runner.contract.atomic import write_atomic


class SeenIds:
    def __init__(self, path: str | None, limit: int = 1000):
        self.path, self.limit = path, limit
        self._lock = threading.Lock()
        self._ids: dict[str, str] = {}
        if path:
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
                if isinstance(data, dict):
                    self._ids = {str(k): str(v) for k, v in data.items()}
            except (OSError, json.JSONDecodeError):
                pass  # a missing or torn file starts empty

    def claim(self, key: str, who: str = "") -> bool:
        """True the first time key is seen, False ever after."""
        with self._lock:
            if key in self._ids:
                return False
            self._ids[key] = who
            while len(self._ids) > self.limit:
                self._ids.pop(next(iter(self._ids)))
            self._save()
            return True

    def owner(self, key: str) -> str | None:
        return self._ids.get(key)

    def release(self, key: str) -> None:
        with self._lock:
            if self._ids.pop(key, None) is not None:
                self._save()

    def _save(self) -> None:
        if self.path:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            write_atomic(self.path, json.dumps(self._ids))
