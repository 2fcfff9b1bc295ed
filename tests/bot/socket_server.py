"""A local stand-in for Slack's Socket Mode endpoint, on the standard library only.

It speaks what slack_sdk's builtin client expects: an HTTP/1.1 upgrade answered with 101 and a
correct Sec-WebSocket-Accept, unmasked frames out, masked frames in, a pong for every ping. Once a
client is connected it sends `hello`; the test pushes envelopes and waits for their acks.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, CLOSE, PING, PONG = 0x1, 0x8, 0x9, 0xA
POLL_S = 0.05


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, final frame (servers never mask)."""
    n = len(payload)
    if n <= 125:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n <= 0xFFFF:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


class Closed(Exception):
    pass


class SocketModeServer:
    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(POLL_S)
        self.url = f"ws://127.0.0.1:{self.listener.getsockname()[1]}/link/?ticket=test"
        self.cond = threading.Condition()
        self.conn: socket.socket | None = None
        self.send_lock = threading.Lock()
        self.requests: list[str] = []  # handshake request lines, one entry per connection
        self.acks: dict[str, dict] = {}  # envelope_id -> what the client sent back
        self.pings = 0
        self.errors: list[str] = []  # protocol faults seen on the server thread
        self._stop = False
        self._next_id = 0
        self.thread = threading.Thread(target=self._serve, name="socket-mode-server", daemon=True)
        self.thread.start()

    # --- the test's side ----------------------------------------------------------------

    def wait_connected(self, timeout: float = 15.0) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: self.conn is not None, timeout):
                raise AssertionError("the bot never opened the Socket Mode connection")

    def send_envelope(self, kind: str, payload: dict, accepts_response_payload: bool = False, **extra) -> str:
        with self.cond:
            self._next_id += 1
            envelope_id = f"env-{self._next_id:04d}"
        msg = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": accepts_response_payload,
            **extra,
        }
        self._send(TEXT, json.dumps(msg).encode())
        return envelope_id

    def wait_ack(self, envelope_id: str, timeout: float = 10.0) -> dict:
        with self.cond:
            if not self.cond.wait_for(lambda: envelope_id in self.acks, timeout):
                raise AssertionError(f"no ack for {envelope_id}; acks so far: {self.acks!r}")
            return self.acks[envelope_id]

    def close(self) -> None:
        self._stop = True
        self.thread.join(5)
        self.listener.close()

    # --- the server's side --------------------------------------------------------------

    def _send(self, opcode: int, payload: bytes) -> None:
        with self.send_lock:
            if self.conn is None:
                raise AssertionError("no Socket Mode client is connected")
            self.conn.sendall(frame(opcode, payload))

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(POLL_S)
            try:
                self._session(conn)
            except (Closed, OSError):
                pass
            except Exception as e:  # surfaced by the test through self.errors
                self.errors.append(repr(e))
            finally:
                with self.cond:
                    self.conn = None
                conn.close()

    def _session(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += self._recv(conn, 1)
        lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
        if headers.get("upgrade", "").lower() != "websocket" or "sec-websocket-key" not in headers:
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + f"Sec-WebSocket-Accept: {accept_key(headers['sec-websocket-key'])}\r\n\r\n".encode()
        )
        with self.cond:
            self.requests.append(lines[0])
            self.conn = conn
        hello = {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0APP"}}
        self._send(TEXT, json.dumps(hello).encode())
        with self.cond:
            self.cond.notify_all()
        while True:
            opcode, data = self._read_frame(conn)
            if opcode == PING:
                self.pings += 1
                self._send(PONG, data)
            elif opcode == CLOSE:
                self._send(CLOSE, data[:2])
                return
            elif opcode == TEXT:
                msg = json.loads(data)
                with self.cond:
                    self.acks[msg["envelope_id"]] = msg
                    self.cond.notify_all()

    def _read_frame(self, conn: socket.socket) -> tuple[int, bytes]:
        b1, b2 = self._recv(conn, 2)
        if not b1 & 0x80:
            raise AssertionError("fragmented frames are not expected from the client")
        if not b2 & 0x80:
            raise AssertionError("a client frame arrived unmasked")
        n = b2 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._recv(conn, 2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._recv(conn, 8))
        mask = self._recv(conn, 4)
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(self._recv(conn, n)))
        return b1 & 0x0F, data

    def _recv(self, conn: socket.socket, n: int) -> bytes:
        out = b""
        while len(out) < n:
            if self._stop:
                raise Closed()
            try:
                chunk = conn.recv(n - len(out))
            except TimeoutError:
                continue
            if not chunk:
                raise Closed()
            out += chunk
        return out
