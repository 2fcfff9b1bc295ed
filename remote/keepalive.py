"""Noticing a hop that stops answering while the connection is held.

A frozen VM's kernel still ACKs every packet, so TCP sees nothing wrong and a read waits for
its own timeout (a minute) or TCP's (many). Instead each held connection is asked for a reply
(an SSH global request) every ``keepalive_s``, and at once when a command starts; a hop that
does not answer within ``probe_s`` is gone: the connection is closed, which ends every command
waiting on it at once, and ``cause`` says which hop and why. OpenSSH's ServerAliveInterval
with ServerAliveCountMax 1 does the same.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

import paramiko


class Probe:
    """Asks a transport for a reply without waiting forever on a hung hop."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: weakref.WeakKeyDictionary[paramiko.Transport, threading.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def answers(self, t: paramiko.Transport | None, timeout_s: float) -> bool:
        if t is None or not t.is_active():
            return False
        with self._guard:  # paramiko tracks one global request at a time per transport
            lock = self._locks.setdefault(t, threading.Lock())
        done = threading.Event()

        def ask() -> None:
            if not lock.acquire(timeout=timeout_s):  # an earlier probe is still unanswered
                return
            try:
                t.global_request("keepalive@openssh.com", wait=True)  # a refusal is an answer too
            except Exception:  # noqa: BLE001 - any failure means no answer
                return
            finally:
                lock.release()
            done.set()

        threading.Thread(target=ask, name="hsx-ssh-probe", daemon=True).start()
        return done.wait(timeout_s) and t.is_active()


class Keepalive:
    """Watches one connection (the target's transport and, when there is one, the jump's)."""

    def __init__(
        self,
        probe: Probe,
        target: paramiko.Transport,
        jump: paramiko.Transport | None,
        interval_s: float,
        probe_s: float,
    ):
        self.probe, self.target, self.jump = probe, target, jump
        self.interval_s, self.probe_s = interval_s, probe_s
        self.cause: tuple[str, str] | None = None  # (hop, detail) once a hop stopped answering
        self._kick = threading.Event()
        threading.Thread(target=self._run, name="hsx-ssh-keepalive", daemon=True).start()

    def kick(self) -> None:
        """Probe now (a command is starting on this connection)."""
        self._kick.set()

    def _run(self) -> None:
        while self.target.is_active():
            self._kick.wait(self.interval_s)
            self._kick.clear()
            if self.probe.answers(self.target, self.probe_s) or not self.target.is_active():
                continue  # answered, or closed by someone else (whose error says why)
            jump_gone = self.jump is not None and not self.probe.answers(self.jump, self.probe_s)
            self.cause = (
                "jump" if jump_gone else "target",
                f"no answer to a keepalive within {self.probe_s:g}s",
            )
            for t in (self.target, self.jump):
                if t is not None:
                    with contextlib.suppress(Exception):
                        t.close()
            return
