"""One hop of the SSH path (user, host, port), as the config spells it and as known_hosts names it."""

from __future__ import annotations

import re
from dataclasses import dataclass

_JUMP_RE = re.compile(
    r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^@:\s\[\]]+)(?::(?P<port>\d+))?$"
)


@dataclass(frozen=True)
class Endpoint:
    user: str
    host: str
    port: int

    @property
    def known_hosts_name(self) -> str:
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


def parse_jump(spec: str, default_user: str) -> Endpoint:
    """``user@host:port`` (user and port optional; IPv6 in brackets)."""
    m = _JUMP_RE.match(spec.strip())
    if not m:
        raise ValueError(f"jump {spec!r} is not user@host:port")
    port = int(m["port"] or 22)
    if not 0 < port < 65536:
        raise ValueError(f"jump {spec!r}: port out of range")
    return Endpoint(m["user"] or default_user, m["host"].strip("[]"), port)
