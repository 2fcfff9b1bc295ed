"""runner.ports: a port to listen on later, outside the range outgoing connections take theirs from."""

from __future__ import annotations

import socket

from runner import ports


def test_a_free_port_is_below_the_ephemeral_range_and_binds():
    low = ports._ephemeral_low()
    for addr in ("127.0.0.1", "127.0.0.2"):
        port = ports.free_port(addr)
        assert port < low
        with socket.socket() as s:
            s.bind((addr, port))  # free: nothing took it meanwhile on this idle loopback address


def test_a_port_something_listens_on_is_not_picked(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        monkeypatch.setattr(ports.random, "randrange", lambda a, b: taken)  # every pick the one held
        monkeypatch.setattr(ports, "TRIES", 3)
        assert ports.free_port() != taken  # the kernel's pick, at last
