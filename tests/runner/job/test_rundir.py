"""Every kind's run dir under one rule (issue 47): the measurement's, the regeneration's and the
pipeline's get the training's. A run dir that is another kind's, a link, inside the job's output,
or a folder of someone else's files is refused at start, naming why, and what is there is left
byte for byte; hsx's own run dirs (marked, or from before the mark) go on. Through the real
`hsx-runner KIND start|resume` verbs, in this process."""

from __future__ import annotations

import json
import os

import pytest

from runner.contract.config import load
from runner.contract.replies import REFUSED
from runner.job import rundir
from tests.conftest import write_config
from tests.runner.helpers import runner_json

KINDS = ("measure", "regenerate", "pipeline")
TRAINING = json.dumps({"phase": "training", "step": 40, "total_steps": 100}) + "\n"


def _conf(tmp, kind: str, run_dir, **more) -> str:
    (tmp / "data").mkdir(exist_ok=True)
    (tmp / "data" / "chat.jsonl").write_text('{"conversations": [{"role": "user", "content": "hi"}]}\n')
    job = {"model": str(tmp / "model"), "dataset": str(tmp / "data" / "chat.jsonl"), "out": str(tmp / "out")}
    sections = {"job": job, kind: {"run_dir": str(run_dir)}, **more}
    if kind == "pipeline":
        sections["pipeline"]["stages"] = ["measure"]
    return write_config(tmp / "hsx.toml", **sections)


def _training(root) -> None:
    """A training's run dir as hsx leaves it: marked, its record beside."""
    os.makedirs(root)
    (root / ".hsx-run").write_text("")  # a training's mark from before the mark named its kind
    (root / "status.json").write_text(TRAINING)


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_dir_that_is_a_trainings_is_refused_and_its_record_kept(tmp_path, kind):
    _training(tmp_path / "old-train")
    code, said = runner_json(kind, _conf(tmp_path, kind, tmp_path / "old-train"), "start")
    assert code == REFUSED and "holds a train run" in said["reason"], said
    assert (tmp_path / "old-train" / "status.json").read_text() == TRAINING
    assert sorted(os.listdir(tmp_path / "old-train")) == [".hsx-run", "status.json"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_dir_another_kind_is_configured_to_use_is_refused(tmp_path, kind):
    train = {"run_dir": str(tmp_path / "shared")}
    code, said = runner_json(kind, _conf(tmp_path, kind, tmp_path / "shared", train=train), "start")
    assert code == REFUSED and "is the train run dir too" in said["reason"], said
    assert not (tmp_path / "shared").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_symlinked_run_dir_is_refused(tmp_path, kind):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    code, said = runner_json(kind, _conf(tmp_path, kind, tmp_path / "link"), "start")
    assert code == REFUSED and "is a symlink" in said["reason"], said
    assert os.listdir(tmp_path / "real") == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_dir_inside_the_extractions_output_is_refused(tmp_path, kind):
    (tmp_path / "out").mkdir()
    code, said = runner_json(kind, _conf(tmp_path, kind, tmp_path / "out" / "run"), "start")
    assert code == REFUSED and "is inside [job] out" in said["reason"], said
    assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_folder_of_someone_elses_files_is_refused(tmp_path, kind):
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "status.json").write_text('{"mine": true}\n')
    code, said = runner_json(kind, _conf(tmp_path, kind, tmp_path / "theirs"), "start")
    assert code == REFUSED and "holds files hsx did not write" in said["reason"], said
    assert (tmp_path / "theirs" / "status.json").read_text() == '{"mine": true}\n'


def test_a_claimed_run_dir_is_its_kinds_and_no_others(tmp_path):
    cfg = load(_conf(tmp_path, "measure", tmp_path / "m"))
    root = rundir.claim(cfg, "measure")
    assert open(os.path.join(root, rundir.MARK)).read() == "measure\n"
    assert rundir.check(cfg, "measure") == root  # its own: again and again
    other = load(_conf(tmp_path, "regenerate", tmp_path / "m"))
    assert (
        rundir.refusal(other, "regenerate")
        == f"[regenerate] run_dir {root} holds a measure run: set a new or empty folder"
    )


@pytest.mark.parametrize(
    "kind,files",
    [("regenerate", {"status.json": {"phase": "stopped", "done": 3, "source": "/d.jsonl", "output": "/x.jsonl"}}),
     ("measure", {"status.json": {"phase": "crashed", "settings": [], "results": "/r.jsonl"}}),
     ("pipeline", {"status.json": {"phase": "stopped", "stages": ["extract"], "stage": "extract"}}),
     ("regenerate", {"cluster.json": {"ranges": [[0, 1]]}})],
)  # fmt: skip
def test_a_run_from_before_the_mark_is_still_its_kinds(tmp_path, kind, files):
    """Run dirs hsx wrote before the mark existed resume after an upgrade: known by their files."""
    root = tmp_path / "old"
    root.mkdir()
    for name, d in files.items():
        (root / name).write_text(json.dumps(d))
    cfg = load(_conf(tmp_path, kind, root))
    assert rundir.check(cfg, kind) == str(root)
    others = [k for k in KINDS if k != kind]
    assert rundir.owner(str(root), kind) == kind and rundir.owner(str(root), others[0]) == kind
