"""Fixtures for runner tests: the dump contract served in this process."""

from __future__ import annotations

import contextlib

import pytest

from tests.runner.fake_server import InProcess


@pytest.fixture
def dump_server():
    """Factory: dump_server(mode, dump_dir) -> a running InProcess server, stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda mode, dump_dir: stack.enter_context(InProcess(mode, dump_dir))
