"""Real OpenSSH daemons for the remote tests (see tests/sshd.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def closing():
    """Transports to close after the test."""
    made: list = []
    yield made
    for t in made:
        t.close()
