"""Which alert a Resume button may still resume (issue 47): its key against the record read now,
for every kind whose crash or failure alert carries one."""

from __future__ import annotations

import pytest

from bot.verbs.table import MEASURING, PIPELINE, REGENERATING, TRAINING
from bot.watch.standing import ended_key, judged, stands, train_crash_key

RUN = {"phase": "crashed", "pid": 41, "started_at": "2030-01-01T08:00:00Z", "ended_at": None}


@pytest.mark.parametrize("kind", [MEASURING, REGENERATING, PIPELINE])
def test_a_supervised_kinds_alert_stands_for_its_run_and_launch_only(kind):
    key = ended_key(kind, RUN)
    assert judged(key) is kind and stands(key, RUN)
    for later in ({"pid": 42}, {"started_at": "2030-01-02T08:00:00Z"}, {"phase": "running"},
                  {"phase": "done", "ended_at": "2030-01-01T09:00:00Z"}):  # fmt: skip
        assert not stands(key, {**RUN, **later}), later
    failed = {**RUN, "phase": "failed", "ended_at": "2030-01-01T09:00:00Z"}
    assert stands(ended_key(kind, failed), failed)
    assert not stands(ended_key(kind, failed), {**failed, "ended_at": "2030-01-01T10:00:00Z"})


def test_the_trainings_crash_stands_for_its_run_and_launch_only():
    d = {"phase": "crashed", "run_id": "hsx-eagle3", "launches": 2}
    key = train_crash_key(d)
    assert judged(key) is TRAINING and stands(key, d)
    assert not stands(key, {**d, "launches": 3}) and not stands(key, {**d, "phase": "training"})


def test_keys_judged_elsewhere_are_not_judged_here():
    for key in ("crashed:job-1:2030", "train:nan:hsx-eagle3:2", "regenerate:rank:2030:1:7:failed"):
        assert judged(key) is None
