"""A refusal the real runner answers (exit code REFUSED) reads as refused through the client,
whatever keys its JSON carries: chat says "refused" and the audit log records it so, and
`hsx train VERB --json` exits non-zero for it."""

from __future__ import annotations

import json
import sys

from bot import cli
from remote.client import GpuBox
from remote.transport import LocalTransport
from runner.contract.replies import Answer
from tests.conftest import RUNNER, write_config


def _conf(tmp_path) -> str:
    out = tmp_path / "out"
    out.mkdir()
    job = {"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/d.jsonl", "out": out}
    return write_config(tmp_path / "hsx.toml", job=job, train={"python": sys.executable})


def test_the_real_runners_refusals_read_as_refused(tmp_path):
    conf = _conf(tmp_path)
    box = GpuBox(LocalTransport(), RUNNER, conf)
    stop = Answer.from_dict(box.stop())  # nothing runs: the extraction's stop is refused
    assert not stop.ok and stop.message == "not running"
    start = Answer.from_dict(box.call("train", "start"))  # no extraction's output to train on
    assert not start.ok and start.message, start


def test_hsx_train_json_exits_non_zero_for_a_refusal(tmp_path, capsys):
    conf = _conf(tmp_path)
    with open(conf, "a") as f:
        f.write(f'\n[remote]\ntransport = "local"\nrunner = "{RUNNER}"\nrunner_config = "{conf}"\n')
    assert cli.main(["train", "start", "--json", "--config", conf]) == 1
    reply = json.loads(capsys.readouterr().out)
    assert reply["started"] is False and reply["reason"]
    assert cli.main(["train", "status", "--json", "--config", conf]) == 0
