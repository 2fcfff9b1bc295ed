"""Real OpenSSH daemons for the remote tests (see tests/sshd.py)."""

from __future__ import annotations

import os

import pytest

from tests import sshd

REQUIRE_ENV = "HSX_REQUIRE_SSHD"  # CI sets it: a missing sshd fails instead of skipping


def _need_sshd() -> None:
    why = sshd.available()
    if why:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{why} ({REQUIRE_ENV} is set)")
        pytest.skip(why)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setenv("HSX_RETRY_FAST", "1")


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
