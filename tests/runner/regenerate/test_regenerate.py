"""The regeneration with real processes: the demo's tiny target served by the reference backend,
the supervisor killed with -9 at random moments and resumed, a server killed mid-row, rows that
cannot be regenerated; each row exactly once, in input order, byte for byte an uninterrupted run's."""

from __future__ import annotations

import json
import os
import random
import signal

import pytest

from runner.contract.replies import REFUSED
from runner.data import demo_assets
from runner.regenerate import control
from tests.runner.helpers import runner_json, wait_for

pytestmark = pytest.mark.slow  # a real server and supervisor, each importing torch

ROWS = 24


def _config(tmp_path, name: str, extra_rows: list[str] = (), **regen) -> str:
    """A demo workdir's config with its own run dir and output (one workdir, one model: built once)."""
    base = tmp_path.parent / "regen-demo"
    conf0 = demo_assets.build(str(base), ROWS, 0)
    work = tmp_path / name
    work.mkdir()
    data = work / "data.jsonl"
    data.write_bytes((base / "data.jsonl").read_bytes() + "".join(x + "\n" for x in extra_rows).encode())
    text = open(conf0).read().replace('model = "model"', f'model = "{base}/model"')
    text = text.replace('dataset = "data.jsonl"', f'dataset = "{data}"').replace(
        'out = "out"', f'out = "{work}/out"'
    )
    keys = {"max_new_tokens": 12, "concurrency": 3, **regen}
    text += "\n[regenerate]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    (work / "hsx.toml").write_text(text)
    return str(work / "hsx.toml")


def _status(conf):
    code, d = runner_json("regenerate", conf, "status")
    assert code == 0, d
    return d


def _run(conf, verb="start"):
    code, d = runner_json("regenerate", conf, verb)
    assert code == 0 and d["started"], d
    return d["pid"]


def _until_ended(conf, timeout=300.0):
    wait_for(
        lambda: _status(conf)["phase"] in ("done", "failed", "stopped", "crashed"), timeout, 0.2, "its end"
    )
    return _status(conf)


def _lines(conf) -> list[dict]:
    path = os.path.join(_status(conf)["run_dir"], "rows.jsonl")
    out = []
    if not os.path.exists(path):
        return out  # nothing committed yet
    with open(path, "rb") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a torn last line, cut before the next append
    return out


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """An uninterrupted run: the bytes every interrupted one must end with."""
    tmp = tmp_path_factory.mktemp("whole")
    conf = _config(tmp, "whole")
    _run(conf)
    end = _until_ended(conf)
    assert end["phase"] == "done", end
    assert (end["done"], end["total"], end["failed"]) == (ROWS, ROWS, 0)
    with open(end["output"], "rb") as f:
        return conf, f.read()


def test_killed_at_five_random_moments_it_ends_byte_for_byte_as_an_uninterrupted_run(whole, tmp_path):
    _, truth = whole
    conf = _config(tmp_path, "killed")
    rng = random.Random(7)
    moments = sorted(rng.sample(range(1, ROWS - 2), 4))
    pid = _run(conf)
    # the first while its server loads, then at random numbers of committed rows
    wait_for(lambda: _status(conf)["phase"] == "starting_server", 60, 0.05, "its server starting")
    os.kill(pid, signal.SIGKILL)
    for k in moments:
        wait_for(lambda: _status(conf)["phase"] == "crashed", 60, 0.05, "the kill read as a crash")
        pid = _run(conf, "resume")
        wait_for(lambda k=k: len(_lines(conf)) >= k, 300, 0.02, f"{k} rows committed")
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _status(conf)["phase"] == "crashed", 60, 0.05, "the last kill read as a crash")
    assert not os.path.exists(_status(conf)["output"])  # written whole at the end, never before
    _run(conf, "resume")
    end = _until_ended(conf)
    assert end["phase"] == "done", end
    rows = [e["row"] for e in _lines(conf)]
    assert sorted(rows) == list(range(ROWS)) and len(rows) == ROWS  # each row committed exactly once
    with open(end["output"], "rb") as f:
        assert f.read() == truth
    assert (end["done"], end["failed"]) == (ROWS, 0)


def test_each_answer_is_the_targets_and_turn_two_follows_the_targets_own_turn_one(whole):
    from transformers import AutoTokenizer

    from runner.serve.reference_server import Model, Sampling

    conf, truth = whole
    from runner.contract.config import load

    model_dir = load(conf).job.model
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = Model(model_dir, "cpu", "bfloat16", 1, [])
    src = [json.loads(x) for x in open(_status(conf)["source"])]
    out = [json.loads(x) for x in truth.decode().splitlines()]
    multi = next(
        i for i, r in enumerate(src) if sum(t["role"] == "assistant" for t in r["conversations"]) >= 2
    )
    turns = out[multi]["conversations"]
    assert [t["role"] for t in turns] == [t["role"] for t in src[multi]["conversations"]]
    assert {k for k in out[multi]} == {k for k in src[multi]}
    msgs, cut = [], 0
    for t in turns:
        if t["role"] == "assistant":  # what the target says to the turns before, the target's own among them
            ids = tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                      add_special_tokens=False)["input_ids"]  # fmt: skip
            got, finish = model.generate(ids, Sampling({"max_new_tokens": 12, "temperature": 0}))
            cut += finish["type"] == "length"
            got = (
                [x for x in got if x not in tok.all_special_ids]
                if got and got[-1] in tok.all_special_ids
                else got
            )
            assert tok.decode(got, skip_special_tokens=False).strip() == t["content"]
        msgs.append({"role": t["role"], "content": t["content"]})
    originals = [t["content"] for t in src[multi]["conversations"] if t["role"] == "assistant"]
    assert originals != [t["content"] for t in turns if t["role"] == "assistant"]
    # the turns that ran into max_new_tokens, kept on the row's line and counted by rows
    (line,) = [e for e in _lines(conf) if e["row"] == multi]
    assert line.get("cut", 0) == cut
    st = _status(conf)  # the rows cut among those regenerated: the same count in the record and the meta
    meta = json.load(open(control.meta(load(conf))))
    assert st["cut"] == sum(1 for e in _lines(conf) if e.get("cut")) == meta["cut_at_limit"] > 0


BIG_ID = "123456789012345678901234567890"  # past 64 bits: a float once read back by orjson


def test_bad_rows_are_listed_with_their_reasons_and_a_server_killed_mid_row_loses_nothing(whole, tmp_path):
    """Poison rows among them (issue 47's probes): a lone surrogate (as scraped chat dumps hold),
    a NaN, a 30-digit integer id; each said or kept as written, the run goes on to done."""
    _, truth = whole
    huge = json.dumps({"conversations": [{"role": "user", "content": " ".join(["lo"] * 3000)}]})
    ask = '"conversations": [{"role": "user", "content": "ka lo mi"}]'
    bad = ["{not json", json.dumps({"conversations": [{"role": "system", "content": "x"}]}), huge,
           json.dumps({"messages": [{"from": "human", "value": "ka lo mi"}], "id": "sharegpt-1"}),
           '{"id": "\\udc80", ' + ask + "}", "{" + ask + ', "score": NaN}',
           "{" + ask + f', "id": {BIG_ID}' + "}"]  # fmt: skip
    conf = _config(tmp_path, "bad", bad)
    _run(conf)
    wait_for(lambda: len(_lines(conf)) >= 3, 300, 0.02, "rows committed")
    from runner.serve import pidfile

    pid = pidfile.live(os.path.join(_status(conf)["run_dir"], "server.pid"))
    os.kill(pid, signal.SIGKILL)
    end = _until_ended(conf)
    assert end["phase"] == "done", end
    assert end["restarts"] == 1 and end["last_death"], end
    assert (end["total"], end["failed"]) == (ROWS + 7, 5)
    failed = [json.loads(x) for x in open(end["failures"])]
    assert [f["row"] for f in failed] == [ROWS, ROWS + 1, ROWS + 2, ROWS + 4, ROWS + 5]
    assert "bad JSON" in failed[0]["reason"]
    assert "no user turn" in failed[1]["reason"] or "nothing to answer" in failed[1]["reason"]
    assert "too long" in failed[2]["reason"]
    assert (
        "lone surrogate (\\udc80)" in failed[3]["reason"]
        and "NaN is not a JSON number" in failed[4]["reason"]
    )
    out = open(end["output"], "rb").read()
    lines = out.splitlines(keepends=True)
    assert b"".join(lines[:ROWS]) == truth  # a dead server's rows sent again: the same answers
    last = json.loads(lines[ROWS])
    assert (
        last["id"] == "sharegpt-1" and last["messages"][1]["from"] == "gpt" and last["messages"][1]["value"]
    )
    assert f'"id": {BIG_ID}'.encode() in lines[ROWS + 1]  # byte for byte as written, never a float
    assert len(lines) == ROWS + 2
    code, again = runner_json("regenerate", conf, "resume")
    assert code == REFUSED and not again["started"] and "is done" in again["reason"], again
    assert open(end["output"], "rb").read() == out
