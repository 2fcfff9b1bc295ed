"""What the regeneration writes is never its input, however the config names it (issue 47): the
output, its failures file or its meta file naming the input through a symlinked folder or a hard
link is refused at start and at every resume (what a Resume button and a pipeline run), and a
run whose config was pointed at its input meanwhile writes nothing at its end. Through the real
`hsx-runner regenerate` verbs, in this process."""

from __future__ import annotations

import os

import pytest

from runner.contract.config import load
from runner.contract.replies import REFUSED
from runner.regenerate import committed
from tests.conftest import write_config
from tests.runner.helpers import runner_json

ROW = b'{"conversations": [{"role": "user", "content": "ka lo"}], "id": 1}\n'


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "chat.jsonl").write_bytes(ROW)
    os.symlink(d, tmp_path / "alias")  # the same folder by another name
    os.link(d / "chat.jsonl", tmp_path / "hard.jsonl")  # the same file by another name
    return tmp_path


def _conf(tmp, output: str, source: str = "data/chat.jsonl") -> str:
    job = {"model": str(tmp / "model"), "dataset": str(tmp / source), "out": str(tmp / "out")}
    return write_config(tmp / "hsx.toml", job=job, regenerate={"output": str(tmp / output)})


@pytest.mark.parametrize(
    "output,source",
    [("alias/chat.jsonl", "data/chat.jsonl"), ("hard.jsonl", "data/chat.jsonl"),
     ("data/chat.jsonl", "alias/chat.jsonl"), ("data/x.jsonl", "data/x.failed.jsonl")],
    ids=["through-a-symlinked-folder", "a-hard-link", "the-input-through-a-link", "its-failures-file"],
)  # fmt: skip
def test_an_output_that_is_the_input_by_another_name_is_refused_at_start_and_resume(data, output, source):
    if not os.path.exists(data / source):
        (data / source).write_bytes(ROW)
    conf = _conf(data, output, source)
    for verb in ("start", "resume"):
        code, said = runner_json("regenerate", conf, verb)
        assert code == REFUSED and "is the input dataset" in said["reason"], said
    assert (data / "data" / "chat.jsonl").read_bytes() == ROW and not (data / "out-regenerate").exists()


def test_a_run_whose_config_now_names_its_input_writes_nothing_at_its_end(data):
    """Killed, its config edited to write over its input through the link, then ended by a rank or
    a resume that slipped past: the end refuses, the input byte for byte."""
    cfg = load(_conf(data, "alias/chat.jsonl"))
    src = str(data / "data" / "chat.jsonl")
    with pytest.raises(RuntimeError, match="is the input dataset"):
        committed.finish(cfg, src, committed.Rows(), 1)
    assert open(src, "rb").read() == ROW and sorted(os.listdir(data / "data")) == ["chat.jsonl"]
