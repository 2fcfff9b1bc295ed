"""Real OpenSSH daemons for the remote tests (see tests/sshd.py)."""

from __future__ import annotations

import pytest

from tests import sshd

_need_sshd = sshd.need_sshd


@pytest.fixture(scope="module")
def shared_pair(tmp_path_factory):
    """One jump + target for tests that leave the daemons as they found them."""
    _need_sshd()
    with sshd.two_hop(str(tmp_path_factory.mktemp("sshd"))) as pair:
        yield pair


@pytest.fixture
def pair(tmp_path):
    """A fresh jump + target for a test that kills, pauses or re-keys them."""
    _need_sshd()
    with sshd.two_hop(str(tmp_path / "sshd")) as p:
        yield p


@pytest.fixture
def closing():
    """Transports to close after the test."""
    made: list = []
    yield made
    for t in made:
        t.close()
