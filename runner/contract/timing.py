"""Every production poll and wait in one place, and one switch that shortens them for tests.

``HSX_TIMING=fast`` (tests/conftest.py sets it) selects ``FAST``: the same code on short
clocks, so a test waits for the event itself rather than for a production cadence;
``HSX_TIMING=patient`` is ``FAST`` with the status answer's bound lifted, for a test of what an
answer says rather than of when it comes (a starved machine's first read can take past 4 s), in
its own process and every process it starts. Unset, hsx runs on ``PRODUCTION``. Read on every use (it is a dict lookup), so a test can switch profiles
with monkeypatch. Stdlib only: the runner, the bot and remote/ all read it."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

ENV = "HSX_TIMING"


@dataclass(frozen=True)
class Timing:
    # runner/serve/server.py: how often a starting server's log and /health are looked at
    server_poll_s: float = 0.5
    # runner/job/extractor.py: server liveness; sample retries and restarts back off from
    # backoff_initial_s (retries up to backoff_max_s); sweep of dumps given up on
    monitor_s: float = 0.5
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 30.0
    sweep_s: float = 60.0
    # runner/job/record.py: a chart point in events.jsonl; one sample of the run's median rate
    progress_event_s: float = 60.0
    rate_sample_s: float = 60.0
    # runner/job/background.py: a detached verb rewrites its progress record at most this often
    background_write_s: float = 1.0
    # remote/keepalive.py: a held connection is probed every keepalive_s (and as each command
    # starts); a hop that does not answer a probe within probe_s is gone (a bound on an answer,
    # the same in both profiles: at 1 s a starved machine's sshd missed it and a start failed). remote/ssh.py: the
    # remote `timeout -k` kills kill_grace_s after TERM; ACK nudges (see SSHTransport._collect)
    keepalive_s: float = 5.0
    probe_s: float = 2.0
    kill_grace_s: int = 2
    nudge_s: float = 0.5
    nudge_every_s: float = 0.02
    # remote/retry.py: retry_first_wait_s doubling up to retry_max_wait_s, plus up to retry_jitter_s
    retry_first_wait_s: float = 0.5
    retry_max_wait_s: float = 8.0
    retry_jitter_s: float = 0.5
    # remote/live.py: a status question ("progress?", `hsx status`, a watcher poll) waits this
    # long for the box, then answers with the last record seen while the read goes on
    status_answer_s: float = 4.0
    # bot/demo.py: `hsx demo --headless` re-reads the status this often: each read is an
    # `hsx-runner ... status` process (~0.3 s of CPU), so the fast profile's is 1 s, not less
    # (at 0.1 s the demo's own polls kept half a core busy beside the job they watched)
    headless_poll_s: float = 2.0
    # runner/engines, runner/job/background: how often a start looks for its child's lock and
    # record, a stop for the lock's release, a Slurm stop for its ranks' end
    answer_poll_s: float = 0.05
    stop_poll_s: float = 0.1
    cluster_stop_poll_s: float = 0.5
    # runner/job/detach.py: a started child claims its job within claim_s (the runner its lock,
    # the supervisor or a background verb its record); the runner's set-up passes within
    # settle_s. Bounds on an event, not cadences: the same in both profiles (a busy box is slow)
    claim_s: float = 30.0
    settle_s: float = 30.0


PRODUCTION = Timing()
# The nudges are a latency fix, not a wait, and the status answer is a promise: the same in both.
FAST = Timing(
    server_poll_s=0.05, monitor_s=0.05, backoff_initial_s=0.05, backoff_max_s=0.2, sweep_s=0.5,
    progress_event_s=1.0, rate_sample_s=1.0, background_write_s=0.1, keepalive_s=0.5,
    kill_grace_s=1, retry_first_wait_s=0.01, retry_max_wait_s=0.01, retry_jitter_s=0.0, headless_poll_s=1.0,
    answer_poll_s=0.02, stop_poll_s=0.02, cluster_stop_poll_s=0.1,
)  # fmt: skip
PATIENT = replace(FAST, status_answer_s=300.0)
PROFILES = {"": PRODUCTION, "production": PRODUCTION, "fast": FAST, "patient": PATIENT}


def current() -> Timing:
    name = os.environ.get(ENV, "")
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"{ENV}={name!r}: want 'fast' or 'patient' (tests) or unset") from None
