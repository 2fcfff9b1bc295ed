"""A local stand-in for Slack's Web API and response URLs that records every call."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BOT_USER = "U0BOT"


class Recorder:
    def __init__(self):
        self.calls: list[tuple[str, dict]] = []  # (method or "response" or "upload", body)
        self.lock = threading.Lock()
        self.fail: set[str] = set()  # methods that answer ok=false
        self.socket_url = ""  # what apps.connections.open hands out (Socket Mode)
        self.members: dict[str, list[str]] = {}  # channel -> members (conversations.members)
        self._ts = 0

    def add(self, name: str, body: dict) -> None:
        with self.lock:
            self.calls.append((name, body))

    def next_ts(self) -> str:
        with self.lock:
            self._ts += 1
            return f"1700000000.{self._ts:06d}"

    def named(self, name: str) -> list[dict]:
        with self.lock:
            return [b for n, b in self.calls if n == name]

    def wait_for(self, name: str, count: int = 1, timeout: float = 60.0) -> list[dict]:
        """The calls once ``count`` of them came: a wait on the event itself, whose deadline only
        ends a failing test (a busy box's first chart import and render took over 10 s)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self.named(name)
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise AssertionError(
            f"expected {count} {name} call(s), got {self.named(name)!r}; all: {self.calls!r}"
        )


def _body(handler: BaseHTTPRequestHandler) -> dict:
    raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    ctype = handler.headers.get("Content-Type", "")
    if handler.path.startswith("/upload/"):
        return {"_bytes": len(raw), "_head": raw[:8]}
    if "json" in ctype:
        return json.loads(raw or b"{}")
    if "x-www-form-urlencoded" in ctype:
        return {k: v[0] for k, v in urllib.parse.parse_qs(raw.decode()).items()}
    return {"_raw": raw.decode(errors="replace")}


def start(rec: Recorder) -> tuple[ThreadingHTTPServer, str]:
    """Serve on a free port; returns the server and its base URL (ends with '/')."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            path = self.path
            body = _body(self)
            if path.startswith("/response/"):
                rec.add("response", body)
                return self._send({"ok": True})
            if path.startswith("/upload/"):
                rec.add("upload", body)
                return self._send({"ok": True})
            method = path.removeprefix("/api/")
            if method == "apps.connections.open":  # the only call made with the xapp- token
                body = {**body, "_auth": self.headers.get("Authorization", "")}
            rec.add(method, body)
            if method in rec.fail:
                return self._send({"ok": False, "error": "fatal_error"})
            if method == "auth.test":
                return self._send({"ok": True, "user_id": BOT_USER, "bot_id": "B0BOT", "team_id": "T0TEAM"})
            if method == "apps.connections.open":
                if not rec.socket_url:
                    return self._send({"ok": False, "error": "internal_error"})
                return self._send({"ok": True, "url": rec.socket_url})
            if method == "conversations.members":
                return self._send({"ok": True, "members": rec.members.get(body.get("channel"), [])})
            if method == "chat.postMessage":
                return self._send({"ok": True, "channel": body.get("channel"), "ts": rec.next_ts()})
            if method == "files.getUploadURLExternal":
                url = f"http://127.0.0.1:{self.server.server_port}/upload/F0FILE"
                return self._send({"ok": True, "upload_url": url, "file_id": "F0FILE"})
            if method == "files.completeUploadExternal":
                return self._send({"ok": True, "files": [{"id": "F0FILE"}]})
            return self._send({"ok": True, "ts": body.get("ts", ""), "channel": body.get("channel", "")})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/api/"
