"""A port to listen on later: free now and below the kernel's ephemeral range. A port picked by
binding port 0 is in that range, where any outgoing connection may take it before the server it
was picked for binds it (a busy box's client took one between two servers of the demo)."""

from __future__ import annotations

import random
import socket

LOW = 20000  # the bottom of the range picked from, above the well-known and registered ports' crowd
TRIES = 50


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # the kernel's default


def free_port(addr: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``addr`` now, outside the ephemeral range where one is free
    there; else one the kernel picks."""
    high = _ephemeral_low()
    for _ in range(TRIES):
        port = random.randrange(min(LOW, high - 1000), high)
        with socket.socket() as s:
            try:
                s.bind((addr, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]
