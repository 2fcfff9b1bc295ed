"""The kinds table both sides read (runner.contract.kinds): the ops side asks each kind by it
(GpuBox.call, GpuBox.record), the box's CLI answers the same names and actions, and the real
runner's replies come back typed."""

from __future__ import annotations

import argparse

import pytest

from remote.client import GpuBox
from remote.transport import LocalTransport, Result
from runner import cli
from runner.contract.kinds import KINDS
from runner.contract.measure import MeasureRecord
from runner.contract.regenerate import RegenerateRecord
from runner.contract.status import StatusRecord
from runner.contract.train import TrainRecord
from tests.conftest import RUNNER, write_config


def _verbs() -> dict[str, tuple[str, ...]]:
    """hsx-runner's verbs and each one's action choices, from its own parser."""
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, p in sub.choices.items():
        action = next((a for a in p._actions if a.dest == "action"), None)
        out[name] = tuple(action.choices) if action is not None else ()
    return out


def test_each_kind_is_a_runner_verb_with_the_same_actions():
    verbs = _verbs()
    for k in KINDS.values():
        assert verbs[k.name] == k.actions, k.name
        assert k.long <= set(k.actions) and "status" not in k.long


class Recording:
    def __init__(self):
        self.calls: list[tuple[list[str], float]] = []

    def run(self, argv, timeout_s, once=False):
        self.calls.append((argv, timeout_s, once))
        return Result(0, '{"started": true}', "")

    def close(self):
        pass


def test_an_action_outside_the_table_is_refused_before_any_command():
    t = Recording()
    box = GpuBox(t, "/opt/hsx/bin/hsx-runner", "/etc/hsx.toml", timeout_s=30.0)
    for kind, bad in (("measure", "export"), ("pipeline", "resume"), ("train", "start; reboot")):
        with pytest.raises(ValueError, match=f"{kind}: the action must be one of"):
            box.call(kind, bad)
    assert t.calls == []
    box.call("train", "start")
    box.call("train", "status")
    (start, _, _), (status, _, _) = t.calls
    assert start == ["/opt/hsx/bin/hsx-runner", "train", "--json", "--config", "/etc/hsx.toml", "start"]
    assert [timeout for _, timeout, _ in t.calls] == [1800.0, 30.0]  # the long action waits long
    assert [once for _, _, once in t.calls] == [True, False]  # a start is never sent twice; a status may be


def test_the_real_runner_answers_every_kind_typed(tmp_path):
    conf = write_config(
        tmp_path / "hsx.toml",
        job={"model": "m", "dataset": str(tmp_path / "d.jsonl"), "out": str(tmp_path / "out")},
        pipeline={"stages": ["regenerate", "extract"]},
    )
    box = GpuBox(LocalTransport(), RUNNER, conf)
    types = {
        "extract": StatusRecord,
        "train": TrainRecord,
        "measure": MeasureRecord,
        "regenerate": RegenerateRecord,
    }
    for kind, typ in types.items():
        rec = box.record(kind)
        assert isinstance(rec, typ) and rec.phase == "stopped", kind
    pipe = box.record("pipeline")
    assert pipe["phase"] == "stopped" and pipe["phases"] == {"regenerate": "stopped", "extract": "stopped"}


def test_the_extraction_is_a_kind_and_its_unprefixed_verbs_stay_aliases(tmp_path):
    """`hsx-runner extract ACTION` and `hsx-runner ACTION` answer the same (issue 46: the extraction
    a kind like the others; operators and older clients keep the bare verbs)."""
    conf = write_config(
        tmp_path / "hsx.toml",
        job={"model": "m", "dataset": str(tmp_path / "d.jsonl"), "out": str(tmp_path / "out")},
    )
    box = GpuBox(LocalTransport(), RUNNER, conf)
    assert box.record("extract").to_dict() == box.status().to_dict()
    t = Recording()
    GpuBox(t, "/opt/hsx/bin/hsx-runner", "/etc/hsx.toml", timeout_s=30.0).call("extract", "start")
    ((argv, timeout, once),) = t.calls
    assert argv[1:3] == ["extract", "--json"] and argv[-1] == "start" and timeout == 600.0 and once
    assert (
        cli.parser().parse_args(["extract", "start", "--force"]).force
    )  # past preflight, as `start --force`
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["train", "start", "--force"])  # a kind without gates to pass has no --force


def test_a_kind_is_followed_where_its_config_asks_for_it():
    """ "progress?" and the watcher read one answer (KindSpec.followed): a kind not asked for is
    neither said nor watched; the extraction always is."""
    from runner.contract.config import from_dict

    base = {"job": {"model": "m", "dataset": "d.jsonl", "out": "o"}}
    followed = lambda **more: {k for k, s in KINDS.items() if s.followed(from_dict({**base, **more}))}  # noqa: E731
    assert followed() == {"extract"}
    assert followed(train={"python": "/venv/bin/python"}) == {"extract", "train", "measure"}
    assert followed(measure={"draft": "d"}) == {"extract", "measure"}
    assert followed(regenerate={"max_new_tokens": 64}) == {"extract", "regenerate"}
    # a pipeline that regenerates resolves its [regenerate] section (its run_dir, its output)
    assert followed(pipeline={"stages": ["regenerate", "extract"]}) == {"extract", "regenerate", "pipeline"}
