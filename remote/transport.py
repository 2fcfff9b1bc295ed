"""Transports run an argv on the GPU box and return its exit code and output.

They never take shell text: argv is a list; the SSH transport quotes each element."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Protocol

from runner.contract.config import without_secrets

from .errors import CommandTimeout, Unreachable


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


class Transport(Protocol):
    def run(self, argv: list[str], timeout_s: float, once: bool = False) -> Result: ...

    def close(self) -> None: ...


class LocalTransport:
    """The GPU box is this machine (hsx demo, tests)."""

    def run(self, argv: list[str], timeout_s: float, once: bool = False) -> Result:
        try:  # once: a local command is never sent twice
            p = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                env=without_secrets(os.environ),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise CommandTimeout(argv, timeout_s) from None
        except FileNotFoundError as e:
            raise Unreachable("local", f"cannot run {argv[0]}: {e}") from None
        return Result(p.returncode, p.stdout, p.stderr)

    def close(self) -> None:
        pass
