"""The status record from JSON: every field checked, a malformed one refused by name, and every
record it accepts renders."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from bot.render import summary
from bot.watch import pinned
from bot.watch.watcher import Limits, Observation, WatchState, decide
from runner.contract.errors import StatusError
from runner.contract.status import EXTRACTION_PHASES, Phase, StatusRecord
from runner.text import extraction

NOW = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
GOOD = {
    "schema": 1, "job": "eagle3", "phase": "extracting", "host": "gpu-1", "pid": 4242, "alive": True,
    "heartbeat_at": "2030-01-01T11:59:50Z", "started_at": "2030-01-01T09:00:00Z",
    "phase_since": "2030-01-01T09:12:00+00:00", "total": 37312, "done": 25581, "done_this_run": 7160,
    "rate": 1.16, "eta_s": 10150, "disk": {"path": "/data", "used": 3, "free": 8, "need": None},
    "server": {"backend": "sglang", "pid": 7, "restarts": 1, "started_at": "2030-01-01T09:01:00Z"},
    "log_tail": ["a", "b"], "background": {"verb": "verify", "state": "running", "done": 3, "total": 9},
    "ranks": [{"rank": 0, "lo": 0, "hi": 2000, "state": "running", "rate": 0.5, "node": "gpu-3"}],
}  # fmt: skip


def with_(**changes) -> dict:
    d = json.loads(json.dumps(GOOD))
    d.update(changes)
    return d


def test_a_well_formed_record_round_trips_and_unknown_keys_are_ignored():
    rec = StatusRecord.from_dict(with_(from_a_newer_runner={"x": 1}))
    assert rec.phase is Phase.EXTRACTING and rec.eta_s == 10150 and rec.ranks[0].rate == 0.5
    assert StatusRecord.from_dict(rec.to_dict()) == rec
    assert StatusRecord.from_dict({"phase": "stopped"}) == StatusRecord(phase=Phase.STOPPED)


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"heartbeat_at": 5}, "'heartbeat_at' is not a string or null"),
        ({"heartbeat_at": "yesterday"}, "'heartbeat_at' is not an ISO 8601 time"),
        ({"phase_since": "9999-12-31T23:59:59-14:00"}, "'phase_since' is not an ISO 8601 time"),
        ({"last_commit_at": ["2030"]}, "'last_commit_at' is not a string or null"),
        ({"phase": "exploded"}, "unknown phase 'exploded'"),
        ({"phase": 3}, "unknown phase 3"),
        ({"schema": "1"}, "'schema' is not an integer"),
        ({"pid": "4242"}, "'pid' is not an integer or null"),
        ({"total": 1.5}, "'total' is not an integer"),
        ({"done": True}, "'done' is not an integer"),
        ({"in_flight": None}, "'in_flight' is not an integer"),
        ({"alive": "yes"}, "'alive' is not true or false"),
        ({"rate": "fast"}, "'rate' is not a number or null"),
        ({"rate": float("nan")}, "'rate' is not a number"),
        ({"eta_s": float("inf")}, "'eta_s' is not a number"),
        ({"job": 7}, "'job' is not a string"),
        ({"last_error": ["boom"]}, "'last_error' is not a string or null"),
        ({"log_tail": "boom"}, "'log_tail' is not a list of strings"),
        ({"log_tail": ["ok", {"x": 1}]}, "'log_tail' is not a list of strings"),
        ({"background": "verify"}, "'background' is not an object"),
        ({"background": {"verb": "verify", "done": "3"}}, "'background' field 'done' is not an integer"),
        ({"background": {"verb": "verify", "eta_s": "soon"}}, "'background' field 'eta_s' is not a number"),
        ({"background": {"verb": "verify", "result": []}}, "'background' field 'result' is not an object"),
        ({"disk": "full"}, "'disk' is not an object"),
        ({"disk": {"free": "8"}}, "'disk' field 'free' is not an integer"),
        ({"disk": {"need": 1.5}}, "'disk' field 'need' is not an integer or null"),
        ({"server": []}, "'server' is not an object"),
        ({"server": {"restarts": "1"}}, "'server' field 'restarts' is not an integer"),
        ({"server": {"started_at": "5"}}, "'server' field 'started_at' is not an ISO 8601 time"),
        ({"server": {"activity": None}}, "'server' field 'activity' is not a string"),
        ({"ranks": [{"rank": "0"}]}, "field 'rank' is not an integer"),
        ({"ranks": [{"rank": 0, "rate": "x"}]}, "rank 0 field 'rate' is not a number or null"),
        ({"ranks": [{"rank": 0, "node": None}]}, "rank 0 field 'node' is not a string"),
        ({"ranks": [{"rank": 0, "state": 3}]}, "rank 0 has unknown state 3"),
    ],
)
def test_each_malformed_field_is_refused_by_name(changes, match):
    with pytest.raises(StatusError, match=match):
        StatusRecord.from_dict(with_(**changes))


def test_the_refusal_never_repeats_a_long_value():
    with pytest.raises(StatusError) as e:
        StatusRecord.from_dict(with_(phase="x" * 5000))
    assert len(str(e.value)) < 200


EXTREMES = [
    {"total": 0, "done": 5},
    {"done": -3, "total": 10, "failed": -1, "in_flight": -2, "errors_this_run": -7},
    {"done": 10**30, "total": 10**31, "adopted": 10**29, "truncated": 10**29},
    {"eta_s": 1e300, "rate": 1e-300, "tokens_per_s": 1e300, "rate_median": 1e300},
    {"eta_s": -1e300, "oldest_in_flight_s": 1e300, "oldest_in_flight_idx": -1, "latency_p50_s": 1e300},
    {"latency_p95_s": -1e300, "latency_p50_s": -5, "rate_low_since": "0001-01-01T00:00:00Z"},
    {"heartbeat_at": "0001-01-01T00:00:00Z", "phase_since": "9999-12-31T23:59:59Z"},
    {"heartbeat_at": "9999-12-31T23:59:59Z", "last_commit_at": "0001-01-01"},
    {"heartbeat_age_s": 1e300, "disk": {"path": "", "used": -1, "free": 10**40, "need": 10**41}},
    {"server": {"restarts": 10**20, "started_at": "0001-01-01T00:00:00Z", "pid": -1}},
    {"background": {"verb": "verify", "state": "running", "done": 10**20, "total": 1, "eta_s": 1e300,
                    "rate_bytes_s": 1e300, "freed": 10**30}},
    {"background": {"verb": "compact", "state": "done", "result": {"recoded": "x", "freed": None}}},
    {"background": {"state": "failed"}, "log_tail": [], "ranks": []},
    {"ranks": [{"rank": -1, "state": "node_fail", "eta_s": 1e300, "heartbeat_age_s": -1e300}]},
]  # fmt: skip


@pytest.mark.parametrize("phase", [p.value for p in EXTRACTION_PHASES])
@pytest.mark.parametrize("extreme", EXTREMES)
def test_every_record_it_accepts_renders_and_is_judged(phase, extreme):
    rec = StatusRecord.from_dict(with_(phase=phase, **extreme))
    assert extraction.render_text(rec, NOW)
    extraction.render_detail(rec, NOW)
    summary.render_blocks(rec, NOW)
    state = WatchState(run=rec.started_at or "", errors=0, progress_at="2029-01-01T00:00:00Z")
    _, state = decide(state, Observation(NOW, record=rec), Limits())
    actions, _ = pinned.judge(state, {"extraction": rec}, NOW, Limits(), read=["extraction"])
    assert [a.kind for a in actions] == ["progress"] and actions[0].blocks


def test_one_phase_enum_each_kind_its_own_words_of_it():
    """Every kind's phases are words of the one enum, terminal or active as the enum says; a
    record of one kind holding another kind's phase is refused by name."""
    from runner.contract import measure, pipeline, regenerate, train

    kinds = (
        {p.value for p in EXTRACTION_PHASES}
        | set(train.PHASES)
        | set(measure.PHASES)
        | set(regenerate.PHASES)
        | set(pipeline.PHASES)
    )
    assert kinds == {p.value for p in Phase}
    for kind in (train, measure, regenerate, pipeline):
        assert kind.ACTIVE == tuple(p for p in kind.PHASES if Phase(p).is_active())
    assert {"done", "stopped", "crashed", "preflight"} <= set(train.PHASES)
    with pytest.raises(StatusError, match="unknown phase 'training'"):
        StatusRecord.from_dict(with_(phase="training"))
    with pytest.raises(StatusError, match="unknown phase 'extracting'"):
        train.TrainRecord.from_dict({"phase": "extracting"})
    with pytest.raises(StatusError, match="unknown phase 'measuring'"):
        regenerate.RegenerateRecord.from_dict({"phase": "measuring"})
