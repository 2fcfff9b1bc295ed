"""SSH transport: one persistent paramiko connection to the jump host and, through a
direct-tcpip channel on it, one to the GPU box; every command is a new channel on it.

- Host keys are pinned for both hops against one known_hosts file; unknown or changed keys
  are refused with the fingerprint and how to trust it, never added.
- Keys come from the identity file, then the SSH agent.
- A hop that stops answering is noticed within a keepalive interval (``remote.keepalive``) and
  the connection dropped; the next call reconnects. Failures name the hop and are retried by
  ``remote.retry`` only when transient. ``close`` ends a connect under way, too.
- argv is quoted with ``shlex.join`` and run with ``exec``, not a login shell; sshd still runs
  the account's shell with ``-c``, so the command is one simple command the shell execs.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import socket
import threading
import time
import weakref
from collections.abc import Callable

import paramiko

from runner.contract import timing

from . import retry, trust
from .endpoint import Endpoint, parse_jump
from .errors import CommandTimeout, RemoteError, Unreachable
from .keepalive import Keepalive, Probe
from .transport import Result

MAX_COMMAND_BYTES = 100_000  # the shell gets the command as one argument (Linux: 128 KiB at most)
READ_CHUNK = 1 << 16


class SSHTransport:
    """Runs argv on the GPU box through the jump host. Safe to share between threads."""

    def __init__(
        self,
        host: str,
        port: int = 22,
        user: str = "root",
        identity_file: str = "",
        known_hosts: str = "~/.ssh/known_hosts",
        jump: str | None = None,
        connect_timeout_s: float = 10.0,
        keepalive_s: float | None = None,  # None: the timing profile's
        on_retry: Callable[[retry.RetryRecord], None] | None = None,
        attempts: int = retry.ATTEMPTS,
        retry_total_s: float = retry.TOTAL_S,
    ):
        if not host:
            raise ValueError("ssh: host is required")
        if not 0 < port < 65536:
            raise ValueError(f"ssh: port out of range: {port}")
        keepalive_s = timing.current().keepalive_s if keepalive_s is None else keepalive_s
        if connect_timeout_s <= 0 or keepalive_s <= 0:
            raise ValueError("ssh: connect_timeout_s and keepalive_s must be positive")
        self.target = Endpoint(user, host, port)
        self.jump = parse_jump(jump, user) if jump else None
        self.identity_file = os.path.expanduser(identity_file) if identity_file else ""
        self.known_hosts = os.path.expanduser(known_hosts)
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self.on_retry = on_retry
        self.attempts = attempts
        self.retry_total_s = retry_total_s
        self._lock = threading.Lock()
        self._jump_t: paramiko.Transport | None = None
        self._target_t: paramiko.Transport | None = None
        self._probe = Probe()
        self._keepalives: weakref.WeakKeyDictionary[paramiko.Transport, Keepalive] = (
            weakref.WeakKeyDictionary()
        )
        # close() ends what is under way: calls begun before it stop retrying (the epoch moved
        # on), and a connect in progress has its sockets closed (a hung handshake ends at once).
        self._epoch = 0
        self._opening: list = []
        self._opening_lock = threading.Lock()

    # -- public ------------------------------------------------------------------------------

    def run(self, argv: list[str], timeout_s: float, once: bool = False) -> Result:
        """``once``: the command changes the box (a start, a stop): a connection lost after it
        was sent is not retried, as it may have run; the error says so."""
        command = self.command(argv, timeout_s)
        epoch = self._epoch
        return retry.call(
            lambda: self._run_once(argv, command, timeout_s, epoch, once),
            on_retry=self.on_retry,
            attempts=self.attempts,
            total_s=self.retry_total_s,
        )

    def upload(self, data: bytes, path: str, mode: int = 0o644, timeout_s: float = 600.0) -> None:
        """Write data to an absolute path on the GPU box over SFTP on the same connection: a
        temp file beside it, then a rename, so a reader sees the old file or the new one."""
        if not isinstance(data, bytes) or not isinstance(path, str) or not path.startswith("/"):
            raise ValueError("ssh upload: data must be bytes and path an absolute path")
        epoch = self._epoch
        retry.call(
            lambda: self._upload_once(data, path, mode, timeout_s, epoch),
            on_retry=self.on_retry,
            attempts=self.attempts,
            total_s=self.retry_total_s,
        )

    def _upload_once(self, data: bytes, path: str, mode: int, timeout_s: float, epoch: int) -> None:
        t = self._connection(epoch)
        self._kick(t)
        try:
            sftp = paramiko.SFTPClient.from_transport(t)
        except (paramiko.SSHException, EOFError, OSError) as e:
            if t.is_active() and self._probe.answers(t, timing.current().probe_s):
                raise RemoteError(
                    f"{self.target.host}: the GPU box's sshd offers no SFTP ({e or type(e).__name__}); "
                    "enable it with `Subsystem sftp internal-sftp` in its sshd_config"
                ) from None
            raise self._lost(t, f"cannot open SFTP: {e or type(e).__name__}") from None
        tmp = f"{path}.hsx-part"
        try:
            sftp.get_channel().settimeout(timeout_s)
            with sftp.open(tmp, "wb") as f:
                f.set_pipelined(True)
                f.write(data)
            sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, path)
        except (paramiko.SSHException, EOFError, OSError) as e:
            if t.is_active() and isinstance(e, OSError) and e.errno is not None:
                raise RemoteError(f"upload to {path} on the GPU box failed: {e}") from None
            raise self._lost(t, f"connection lost during an upload: {e or type(e).__name__}") from None
        finally:
            sftp.close()

    def close(self) -> None:
        with self._opening_lock:
            self._epoch += 1
            opening, self._opening = self._opening, []
        for x in opening:
            with contextlib.suppress(Exception):
                x.close()
        with self._lock:
            self._close_locked()

    def connected(self) -> bool:
        t = self._target_t
        return t is not None and t.is_active()

    @staticmethod
    def command(argv: list[str], timeout_s: float) -> str:
        """The exact text sshd hands to the account's shell: every element quoted, and the
        remote ``timeout`` so a command we gave up on does not run on."""
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("ssh: argv must be a non-empty list of strings")
        if any("\0" in a for a in argv):
            raise ValueError("ssh: argv must not contain NUL bytes")
        if not timeout_s or timeout_s <= 0:
            raise ValueError("ssh: timeout_s must be positive")
        guard = ["timeout", "-k", str(timing.current().kill_grace_s), str(math.ceil(timeout_s) + 1)]
        text = shlex.join(guard + argv)
        if len(text.encode()) > MAX_COMMAND_BYTES:
            raise ValueError(f"ssh: command is {len(text.encode())} bytes; the limit is {MAX_COMMAND_BYTES}")
        return text

    # -- one attempt -------------------------------------------------------------------------

    def _run_once(self, argv: list[str], command: str, timeout_s: float, epoch: int, once: bool) -> Result:
        t = self._connection(epoch)
        self._kick(t)
        try:
            chan = t.open_session(timeout=self.connect_timeout_s)
        except (paramiko.SSHException, EOFError, OSError):
            # The connection died since its last use: reconnect now, so an error names its hop.
            self._drop(t)
            t = self._connection(epoch)
            try:
                chan = t.open_session(timeout=self.connect_timeout_s)
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise self._lost(t, f"cannot open a channel: {e or type(e).__name__}") from None
        try:
            try:
                chan.exec_command(command)
                return self._collect(t, chan, argv, timeout_s)
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise self._lost(t, f"connection lost during the command: {e or type(e).__name__}") from None
        except Unreachable as e:
            if not once:
                raise
            # Sent, maybe run: a second start would say "already running" of this very one.
            gone = Unreachable(
                e.hop, f"{e.detail}; the command was sent and may have run: ask the status first"
            )
            gone.transient = False
            raise gone from None
        finally:
            chan.close()

    def _collect(
        self, t: paramiko.Transport, chan: paramiko.Channel, argv: list[str], timeout_s: float
    ) -> Result:
        deadline = time.monotonic() + timeout_s
        out: list[bytes] = []
        err: list[bytes] = []

        def drain() -> int:
            while chan.recv_ready():
                out.append(chan.recv(READ_CHUNK))
            while chan.recv_stderr_ready():
                err.append(chan.recv_stderr(READ_CHUNK))
            return len(out) + len(err)

        # Until the exit status (or a close) arrives, read both streams as they come so neither
        # fills the window; status_event wakes us the moment the command ends.
        # sshd keeps Nagle on for commands without a pty, so a small reply written while its
        # previous one is unacknowledged waits up to 40 ms for an ACK the other end delays. A
        # packet from us carries that ACK across both hops at once: send one right after exec,
        # whenever something arrives, and now and then, early on where 40 ms would dominate.
        clock = timing.current()
        start = time.monotonic()
        seen, last_nudge = None, start - clock.nudge_every_s
        while not chan.exit_status_ready():
            now_seen = (drain(), chan.eof_received)
            now = time.monotonic()
            if now >= deadline:
                self._timed_out(t, argv, timeout_s)
            if now - start < clock.nudge_s:
                if now_seen != seen or now - last_nudge >= clock.nudge_every_s:
                    with contextlib.suppress(Exception):
                        t.send_ignore(1)
                    seen, last_nudge = now_seen, now
                chan.status_event.wait(min(deadline - now, 0.002))
            else:
                chan.status_event.wait(min(deadline - now, 0.05))
        # Then read to EOF (it can trail the exit status), still under the deadline.
        chan.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            while data := chan.recv(READ_CHUNK):
                out.append(data)
        except TimeoutError:
            self._timed_out(t, argv, timeout_s)
        drain()
        code = chan.recv_exit_status()
        if code == -1 and not t.is_active():
            raise self._lost(t, "connection lost during the command")
        stderr = b"".join(err).decode(errors="replace")
        if code == -1:
            stderr += "\n(no exit status: the command was killed by a signal)"
        return Result(code, b"".join(out).decode(errors="replace"), stderr)

    def _timed_out(self, t: paramiko.Transport, argv: list[str], timeout_s: float) -> None:
        """The command did not finish: is it the command, or did a hop stop answering?"""
        if self._probe.answers(t, timing.current().probe_s):
            raise CommandTimeout(argv, timeout_s)
        raise self._lost(t, f"no answer within {timeout_s:g}s")

    def _lost(self, t: paramiko.Transport, detail: str) -> Unreachable:
        """Drop a connection that failed while in use; name the hop that went away."""
        ka = self._keepalives.get(t)
        if ka is not None and ka.cause is not None:  # the keepalive found it gone and knows which hop
            hop, detail = ka.cause
        else:
            jump_t = ka.jump if ka is not None else None
            hop = (
                "jump"
                if self.jump and not self._probe.answers(jump_t, timing.current().probe_s)
                else "target"
            )
        self._drop(t)
        where = self.jump if hop == "jump" else self.target
        return Unreachable(hop, f"{where.host}:{where.port}: {detail}")

    # -- connection --------------------------------------------------------------------------

    def _connection(self, epoch: int) -> paramiko.Transport:
        with self._lock:
            if epoch != self._epoch:
                raise RemoteError("ssh: the connection was closed")  # not transient: no more retries
            t = self._target_t
            if t is not None and t.is_active() and (self._jump_t is None or self._jump_t.is_active()):
                return t
            self._close_locked()
            try:
                self._connect_locked()
            finally:
                with self._opening_lock:
                    self._opening = []
            if epoch != self._epoch:  # closed while connecting
                self._close_locked()
                raise RemoteError("ssh: the connection was closed")
            t = self._target_t
            clock = timing.current()
            self._keepalives[t] = Keepalive(self._probe, t, self._jump_t, self.keepalive_s, clock.probe_s)
            return t

    def _kick(self, t: paramiko.Transport) -> None:
        ka = self._keepalives.get(t)
        if ka is not None:
            ka.kick()

    def _opened(self, x):
        """Note a socket or transport of the connect under way, for close() to end."""
        with self._opening_lock:
            self._opening.append(x)
        return x

    def _drop(self, t: paramiko.Transport) -> None:
        with self._lock:
            if self._target_t is t:  # another thread may have reconnected already
                self._close_locked()

    def _close_locked(self) -> None:
        for t in (self._target_t, self._jump_t):
            if t is not None:
                # Closing the target's transport closes its channel on the jump, which fails
                # when the jump is already gone; the connection is finished either way.
                with contextlib.suppress(Exception):
                    t.close()
        self._target_t = self._jump_t = None

    def _connect_locked(self) -> None:
        keys = trust.load_keys(self.identity_file)
        if self.jump is None:
            self._target_t = self._handshake("target", self.target, self._tcp(self.target, "target"), keys)
            return
        jump_t = self._handshake("jump", self.jump, self._tcp(self.jump, "jump"), keys)
        try:
            chan = self._forward(jump_t)
            self._target_t = self._handshake("target", self.target, chan, keys)
        except BaseException:
            jump_t.close()
            raise
        self._jump_t = jump_t

    def _tcp(self, ep: Endpoint, hop: str) -> socket.socket:
        try:
            sock = self._opened(socket.create_connection((ep.host, ep.port), timeout=self.connect_timeout_s))
        except OSError as e:
            raise Unreachable(hop, f"{ep.host}:{ep.port}: {e.strerror or e}") from None
        # Small request/reply packets: do not let Nagle hold them for the peer's delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Notice a silently dead peer: TCP keepalive when idle, and a bound on unacknowledged data.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        idle = max(1, int(self.keepalive_s))
        for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", idle), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, idle * 4 * 1000)
        return sock

    def _forward(self, jump_t: paramiko.Transport) -> paramiko.Channel:
        dest = (self.target.host, self.target.port)
        try:
            return jump_t.open_channel("direct-tcpip", dest, ("127.0.0.1", 0), timeout=self.connect_timeout_s)
        except paramiko.ChannelException as e:
            where = f"{self.target.host}:{self.target.port}"
            if e.code == paramiko.common.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED:
                err = Unreachable("target", f"the jump host refuses to forward to {where} ({e.text})")
                err.transient = False  # a policy on the jump, not a blip
                raise err from None
            raise Unreachable("target", f"the jump host cannot connect to {where}: {e.text}") from None
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise Unreachable(
                "jump", f"no forwarding channel to the target: {e or type(e).__name__}"
            ) from None

    def _handshake(self, hop: str, ep: Endpoint, sock, keys: list[paramiko.PKey]) -> paramiko.Transport:
        t = self._opened(paramiko.Transport(sock))
        t.banner_timeout = t.handshake_timeout = t.auth_timeout = self.connect_timeout_s
        try:
            pins = trust.pinned(self.known_hosts, hop, ep)
            if pins.keys:  # negotiate the key type we hold, so a second key type is not "changed"
                opts = t.get_security_options()
                first = [k for k in opts.key_types if trust.base_type(k) in pins.keys]
                opts.key_types = first + [k for k in opts.key_types if k not in first]
            try:
                t.start_client(timeout=self.connect_timeout_s)
                key = t.get_remote_server_key()  # raises if the handshake ran out of time
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise Unreachable(
                    hop, f"{ep.host}:{ep.port}: SSH handshake failed: {e or type(e).__name__}"
                ) from None
            trust.check_host_key(self.known_hosts, hop, ep, key, pins)
            trust.authenticate(hop, ep, t, keys)
        except BaseException:
            t.close()
            raise
        return t
