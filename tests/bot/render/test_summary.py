"""The renderer in every phase, against fixed clocks."""

from __future__ import annotations

import datetime as dt

import pytest

from bot.render.summary import render_blocks, render_error
from remote.errors import BadReply, CommandFailed, HostKeyMismatch, Unreachable
from runner.contract.status import Phase, StatusRecord
from runner.text.extraction import render_text
from runner.text.human import human_bytes, human_duration

from ..conftest import EXTRACTING

NOW = dt.datetime(2030, 1, 1, 11, 43, tzinfo=dt.timezone.utc)


def rec(**changes) -> StatusRecord:
    d = dict(EXTRACTING)
    d.update(changes)
    return StatusRecord.from_dict(d)


def test_extracting_is_exactly_the_design_summary():
    assert render_text(rec(), NOW) == (
        "25,581 / 37,312 — 68.6% done\n"
        "0 errors since resume · 1.16 samples/s steady · ETA ~2h49m (14:32 UTC)\n"
        "Disk /data: 3.3 TB used, 8.5 TB free (~1.5 TB still needed)"
    )


def test_rate_unknown_is_measuring_and_first_run_counts_since_start():
    text = render_text(rec(rate=None, eta_s=None, done=10, done_this_run=10, errors_this_run=1), NOW)
    assert text.splitlines()[1] == "1 error since start · rate: measuring"


def test_never_claims_100_percent_early_and_flags_short_disk():
    text = render_text(
        rec(done=37311, disk={"path": "/data", "used": 1, "free": 10**12, "need": 3 * 10**12}), NOW
    )
    assert "99.9% done" in text and "short by 2.0 TB" in text


def test_starting_server_shows_elapsed_and_activity():
    r = rec(
        phase="starting_server",
        server={
            "backend": "sglang",
            "started_at": "2030-01-01T11:32:00Z",
            "activity": "Loading safetensors checkpoint shards: 41% 12/29",
        },
    )
    lines = render_text(r, NOW).splitlines()
    assert lines[0] == "Starting server (sglang) — 11m so far"
    assert lines[1] == "now: Loading safetensors checkpoint shards: 41% 12/29"


def test_a_restarting_server_says_which_rank_died_last():
    died = "TP1 scheduler (pid 5109) died, killed by SIGKILL"
    r = rec(phase="starting_server", server={"backend": "sglang", "restarts": 1, "last_death": died})
    assert f"server restarts: 1 (last: {died})" in render_text(r, NOW).splitlines()
    done = rec(phase="done", server={"restarts": 2})
    assert "server restarts: 2" in render_text(done, NOW).splitlines()


@pytest.mark.parametrize(
    "phase,expect",
    [
        ("preflight", "Preflight: checking paths"),
        ("self_test", "Self-test: one request through the dump path"),
        ("paused", "Paused: free space below 500.0 GB since 11:12 UTC (31m ago)"),
        ("stopped", "Stopped on request since 11:12 UTC"),
        ("failed", "FAILED since 11:12 UTC (31m ago): free space below 500.0 GB"),
        ("crashed", "CRASHED since 11:12 UTC (31m ago)"),
    ],
)
def test_each_phase_has_its_own_headline(phase, expect):
    r = rec(
        phase=phase,
        phase_since="2030-01-01T11:12:00Z",
        reason="free space below 500.0 GB",
        last_error="RuntimeError: server died",
        heartbeat_at="2030-01-01T11:42:55Z",
    )
    text = render_text(r, NOW)
    assert text.startswith(expect)
    if Phase(phase).is_failed():
        assert "last error: RuntimeError: server died" in text and "/extract resume" in text


def test_done_lists_failures():
    text = render_text(rec(phase="done", done=37309, failed=3, phase_since="2030-01-01T11:00:00Z"), NOW)
    assert text.startswith("Done: 37,309 / 37,312 written, 3 failed with a reason (see failed.jsonl)")


def test_stale_heartbeat_is_flagged_only_while_active():
    stale = {"heartbeat_at": "2030-01-01T11:30:00Z"}
    assert "no heartbeat for 13m" in render_text(rec(**stale), NOW)
    assert "no heartbeat" not in render_text(rec(phase="stopped", **stale), NOW)


def test_blocks_carry_bar_text_and_host():
    blocks = render_blocks(rec(), NOW)
    assert blocks[0]["text"]["text"].startswith("`▓▓▓▓▓▓▓▓▓▓▓▓▓░░░░░░░` *68.6%*")
    assert blocks[1]["text"]["text"] == render_text(rec(), NOW)
    assert "host gpu-1" in blocks[2]["elements"][0]["text"]


def test_errors_name_the_hop_and_the_plan():
    since = NOW - dt.timedelta(minutes=4)
    text = render_error(Unreachable("jump root@10.1.2.6:22", "connection refused"), since, 30, NOW)
    assert text == (
        "GPU box unreachable — hop: jump root@10.1.2.6:22: connection refused\n"
        "failing since 11:39 UTC (4m00s) · retrying every 30s"
    )
    assert "fingerprint SHA256:abc" in render_error(
        HostKeyMismatch("target", "10.1.230.174", "SHA256:abc", "changed")
    )
    assert "exit 2" in render_error(CommandFailed(["hsx-runner", "status"], 2, "boom"))
    assert "unreadable" in render_error(BadReply("not JSON"))


def test_units():
    assert human_bytes(128_000_000) == "128.0 MB" and human_bytes(999) == "999 B"
    assert human_duration(40) == "40s" and human_duration(3 * 86400 + 7200) == "3d2h"


def test_an_answer_without_a_fresh_record_keeps_the_last_counts_their_age_and_the_problem():
    from bot.render.summary import render_reading
    from remote.live import Reading

    seen = NOW - dt.timedelta(minutes=3)
    err = Unreachable("target", "10.1.230.174:22: SSH handshake failed: Error reading SSH protocol banner")
    r = Reading(rec(), False, seen, err, NOW - dt.timedelta(minutes=2), True)
    assert render_reading(r, NOW) == (
        "GPU box not answering since 11:41 UTC (2m00s) — retrying\n"
        "GPU box unreachable — hop: target: 10.1.230.174:22: SSH handshake failed: Error reading SSH protocol banner\n"
        "last seen 11:40 UTC (3m00s ago):\n"
        + render_text(rec(), seen)  # the contract's own words, as of when it was read
    )


def test_an_answer_for_a_cause_to_fix_says_what_and_never_retrying():
    from bot.render.summary import render_reading
    from remote.errors import AuthFailed
    from remote.live import Reading

    r = Reading(None, False, None, AuthFailed("target", "root@gpu refused every key"), NOW, False)
    text = render_reading(r, NOW)
    assert text.startswith("GPU box refused our key — hop: target") and "retrying" not in text
    assert text.endswith("no status seen from this box yet")


def test_escape_makes_slack_markup_plain_and_cuts_between_entities():
    from bot.render.mrkdwn import escape

    assert escape("<!channel> & <@U1>") == "&lt;!channel&gt; &amp; &lt;@U1&gt;"
    assert escape("ab&", 4) == "ab" and escape("ab&", 7) == "ab&amp;" and escape("abcdef", 3) == "abc"
