"""The one switch between production clocks and the tests' short ones."""

from __future__ import annotations

import dataclasses

import pytest

from runner.contract import timing


def test_production_is_the_default_and_keeps_its_values(monkeypatch):
    monkeypatch.delenv(timing.ENV)
    t = timing.current()
    assert t is timing.PRODUCTION
    assert (t.server_poll_s, t.monitor_s, t.backoff_initial_s, t.backoff_max_s, t.sweep_s) == (
        0.5, 0.5, 1.0, 30.0, 60.0,
    )  # fmt: skip
    assert (t.progress_event_s, t.rate_sample_s, t.background_write_s) == (60.0, 60.0, 1.0)
    assert (t.keepalive_s, t.probe_s, t.kill_grace_s, t.nudge_s, t.nudge_every_s) == (5.0, 2.0, 2, 0.5, 0.02)
    assert t.status_answer_s == 4.0
    assert (t.retry_first_wait_s, t.retry_max_wait_s, t.retry_jitter_s, t.headless_poll_s) == (
        0.5, 8.0, 0.5, 2.0,
    )  # fmt: skip


def test_fast_is_chosen_by_name_and_is_never_slower(monkeypatch):
    monkeypatch.setenv(timing.ENV, "fast")
    assert timing.current() is timing.FAST
    for f in dataclasses.fields(timing.Timing):
        fast, prod = getattr(timing.FAST, f.name), getattr(timing.PRODUCTION, f.name)
        assert 0 <= fast <= prod, f.name


def test_an_unknown_profile_is_refused(monkeypatch):
    monkeypatch.setenv(timing.ENV, "quick")
    with pytest.raises(ValueError, match="HSX_TIMING='quick'"):
        timing.current()


def test_the_remote_timeout_takes_its_grace_from_the_profile(monkeypatch):
    from remote.ssh import SSHTransport

    monkeypatch.setenv(timing.ENV, "fast")
    assert SSHTransport.command(["/bin/true"], 4.2) == "timeout -k 1 6 /bin/true"
    monkeypatch.setenv(timing.ENV, "production")
    assert SSHTransport.command(["/bin/true"], 4.2) == "timeout -k 2 6 /bin/true"


def test_patient_is_fast_with_the_status_answer_unbounded(monkeypatch):
    monkeypatch.setenv(timing.ENV, "patient")
    t = timing.current()
    assert t.status_answer_s == 300.0
    assert dataclasses.replace(t, status_answer_s=timing.FAST.status_answer_s) == timing.FAST
