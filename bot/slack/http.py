"""Serve a bolt app over HTTP (`hsx bot --http PORT [--http-host HOST]`).

Until bolt has checked Slack's signature a request is bytes from anyone, so the server
bounds what it costs: loopback unless told otherwise (a TLS proxy in front), a body of at
most MAX_BODY (a larger one is answered 413 unread), the whole request within
read_timeout_s, and at most `workers` requests at once (one more is answered 503).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn
from urllib.parse import urlsplit

from slack_bolt.request import BoltRequest

PATH = "/slack/events"
LOOPBACK = "127.0.0.1"
MAX_BODY = 1 << 20  # Slack's payloads are a few KB
READ_TIMEOUT_S = 10.0
WORKERS = 16
BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"

log = logging.getLogger("hsx.bot.http")


def _drain(sock: socket.socket) -> None:
    """Half-close, then discard what the client already sent (not more): closing a socket
    with unread bytes resets the connection, and the client might miss the answer."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            for _ in range(16):
                if not sock.recv(1 << 16):
                    break


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    @property
    def timeout(self) -> float:  # each read on the socket (StreamRequestHandler.setup applies it)
        return self.server.read_timeout_s

    def setup(self) -> None:
        super().setup()
        self.dropped = False
        # the whole request, however slowly it trickles in, within the deadline
        self.guard = threading.Timer(self.server.read_timeout_s, self._drop)
        self.guard.daemon = True
        self.guard.start()

    def finish(self) -> None:
        self.guard.cancel()
        with contextlib.suppress(OSError):
            super().finish()
        _drain(self.connection)  # a 413 or 408 leaves the client's bytes unread

    def _drop(self) -> None:
        self.dropped = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def do_POST(self) -> None:
        if self.dropped:
            return
        url = urlsplit(self.path)
        if url.path != PATH:
            return self._send(404, "Not Found")
        declared = self.headers.get("Content-Length")
        if declared is None:
            return self._send(411, "Content-Length required")
        length = int(declared) if declared.strip().isdigit() else -1
        if length < 0:
            return self._send(400, "bad Content-Length")
        if length > MAX_BODY:
            return self._send(413, f"a request body is at most {MAX_BODY} bytes")
        try:
            body = self.rfile.read(length)
        except (TimeoutError, OSError):
            body = b""
        if self.dropped or len(body) < length:
            return self._send(408, "request not received in time")
        self.guard.cancel()
        headers = {k.lower(): v for k, v in self.headers.items()}
        # A body that is not UTF-8 cannot carry a valid signature: bolt answers 401.
        resp = self.server.app.dispatch(
            BoltRequest(body=body.decode("utf-8", "replace"), query=url.query, headers=headers)
        )
        self._send(resp.status, resp.body or "", resp.headers)

    def do_GET(self) -> None:
        self._send(404, "Not Found")

    def _send(self, status: int, body: str, headers: dict | None = None) -> None:
        data = body.encode()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.send_response(status)
            for name, values in (headers or {}).items():
                if name.lower() not in ("content-length", "connection"):
                    for value in values if isinstance(values, list) else [values]:
                        self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)


class _Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address, app, read_timeout_s: float, workers: int):
        self.app, self.read_timeout_s = app, read_timeout_s
        self.slots = threading.BoundedSemaphore(workers)
        super().__init__(address, _Handler)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            self._busy(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _busy(self, request: socket.socket) -> None:
        """503 at once, from the accepting thread; what the client already sent is drained
        first, so the close is a FIN and the answer arrives."""
        with contextlib.suppress(OSError):
            request.sendall(BUSY)
        _drain(request)
        self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        log.debug("HTTP request from %s failed", client_address, exc_info=True)


def make_http_server(
    app, port: int, host: str = LOOPBACK, read_timeout_s: float = READ_TIMEOUT_S, workers: int = WORKERS
) -> HTTPServer:
    """Bound and ready; call serve_forever(). Port 0 picks a free port (server.server_port)."""
    return _Server((host, port), app, read_timeout_s, workers)
