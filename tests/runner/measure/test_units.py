"""The measurement's pure parts: the results file (whole lines, exactly once, a torn line passed
over), the figures computed from it in SGLang's units, the settings, the record's writer, each
setting's server command line and the prompts' turns."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from runner.contract.config import ConfigError, from_dict
from runner.contract.errors import BrokenFileError, StatusError
from runner.contract.measure import NONE, MeasureRecord, parse_setting
from runner.measure import plan, record, results
from runner.serve import plain as serving  # each setting's server
from runner.text.measure import render_measure


def _row(setting, prompt, out, completion, verify=None, correct=None, proposed=None, hist=None, s=1.0):
    meta = {"completion_tokens": completion}
    if verify is not None:
        meta |= {
            "spec_verify_ct": verify,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": proposed,
        }
    if hist is not None:
        meta["spec_correct_drafts_histogram"] = hist
    return {"setting": setting, "prompt": prompt, "output_ids": out, "meta_info": meta, "latency_s": s}


def test_a_torn_line_is_passed_over_and_its_request_measured_again(tmp_path):
    path = str(tmp_path / "results.jsonl")
    results.append(path, _row(NONE, 0, [1, 2], 2))
    with open(path, "ab") as f:
        f.write(b'{"setting": "none", "prompt": 1, "output_ids": [3')  # killed mid-write
    results.append(path, _row(NONE, 2, [5], 1))
    results.append(path, _row(NONE, 0, [9, 9], 2))  # a second line for a done request: the first wins
    done = results.read(path)
    assert sorted(done) == [(NONE, 0), (NONE, 2)] and done[(NONE, 0)]["output_ids"] == [1, 2]
    assert open(path, "rb").read().count(b"\n") == 4  # the torn line was ended, not glued to the next


def test_the_figures_are_sglangs_from_the_kept_meta_info():
    done = {
        (NONE, 0): _row(NONE, 0, [1, 2, 3, 4], 4, s=2.0),
        (NONE, 1): _row(NONE, 1, [5, 6, 7, 8], 4, s=2.0),
        ("3/1/4", 0): _row(
            "3/1/4", 0, [1, 2, 3, 4], 4, verify=2, correct=2, proposed=6, hist=[1, 0, 1], s=0.5
        ),
        ("3/1/4", 1): _row("3/1/4", 1, [5, 6, 0, 8], 4, verify=4, correct=0, proposed=12, hist=[4], s=1.5),
    }
    base, spec, empty = results.figures(done, ["3/1/4", "5/4/8"])
    assert (base.setting, base.requests, base.tokens_per_s, base.accept_length) == (NONE, 2, 2.0, None)
    assert spec.accept_length == 8 / 6  # completion tokens over verify steps, summed: the bonus token counted
    assert spec.accept_rate == 2 / 18 and spec.histogram == [5, 0, 1]
    assert spec.tokens_per_s == 4.0 and spec.speedup == 2.0
    assert spec.same == 1 and spec.differ == [[1, 2, None]]  # prompt 1 differs at its third token
    assert empty.setting == "5/4/8" and empty.requests == 0


def test_a_difference_at_a_near_tie_is_named_as_such_and_any_other_as_the_drafts_serving():
    """The target alone's top two logprobs at the first differing token say which it is."""
    from runner.text.measure import setting_line

    top = lambda a, b: [[a, 7, None], [b, 0, None]]  # noqa: E731
    alone = [_row(NONE, p, [5, 6, 7, 8], 4) for p in range(3)]
    for r, gap in zip(alone, (0.0008, 1.5, 0.0), strict=True):
        r["top_logprobs"] = [
            top(-0.1, -3.0),
            top(-0.1, -3.0),
            top(-0.70, -0.70 - gap),
            None,
        ]
    alone[2]["top_logprobs"] = None  # its logprob answer's tokens differed from the timed one's
    done = {(NONE, p): r for p, r in enumerate(alone)}
    done |= {("3/1/4", p): _row("3/1/4", p, [5, 6, 0, 8], 4, verify=2) for p in range(3)}
    _, spec = results.figures(done, ["3/1/4"])
    assert spec.same == 0 and spec.differ == [[0, 2, 0.0008], [1, 2, 1.5], [2, 2, None]]
    said = setting_line(dataclasses.asdict(spec))
    assert (
        "1 output differs from the target alone's at a near-tie: prompt 0 at token 2 (top two 0.0008 apart)"
        in said
    )
    assert ("2 outputs differ from the target alone's, not at a near-tie: prompt 1 at token 2 (top two 1.5 apart), "
            "prompt 2 at token 2 — the draft's serving changed what the target says") in said  # fmt: skip


@pytest.mark.parametrize("bad", ["5/4", "a/b/c", "0/1/1", "3/1/5", "", "3/2/-1"])
def test_a_setting_is_steps_topk_draft_tokens(bad):
    assert parse_setting("5/4/8") == (5, 4, 8) and parse_setting("3/1/4") == (3, 1, 4)
    with pytest.raises(ValueError):
        parse_setting(bad)
    with pytest.raises(ConfigError, match=r"\[measure\] settings"):
        from_dict({"measure": {"settings": [bad]}})


def test_the_config_refuses_what_cannot_be_measured():
    for body, said in (({"samples": 0}, "samples"), ({"temperature": -1.0}, "temperature"),
                       ({"settings": []}, "non-empty"), ({"settings": ["3/1/4", "3/1/4"]}, "once")):  # fmt: skip
        with pytest.raises(ConfigError, match=said):
            from_dict({"measure": body})
    assert from_dict({"measure": {"prompts": "p.jsonl"}}, base_dir="/data").measure.prompts == "/data/p.jsonl"


def test_the_writer_is_typed_and_a_dead_supervisor_reads_as_crashed(tmp_path):
    rec = record.KIND.load(str(tmp_path))
    with pytest.raises(KeyError):
        rec.update(accept_len=1.5)
    with pytest.raises(StatusError):
        rec.update(phase="training")
    with pytest.raises(StatusError):
        rec.update(done="3")
    rec.update(
        phase="measuring", pid=999999, done=3, total=8, setting="3/1/4", started_at="2026-12-04T10:00:00Z"
    )
    rec.write()
    got = record.KIND.read(str(tmp_path))  # nobody holds the run's lock
    assert got.phase == "crashed" and "measuring supervisor (pid 999999) is gone" in got.reason
    assert (got.done, got.total) == (3, 8)
    (tmp_path / "status.json").write_text("[1]")
    with pytest.raises(BrokenFileError):
        record.KIND.read(str(tmp_path))
    assert record.KIND.read(str(tmp_path / "none")).reason == "not started yet"


def test_the_record_as_json_reads_back_and_refuses_a_bad_setting():
    d = MeasureRecord(phase="done", done=4, total=4, settings=[{"setting": "none", "requests": 2}]).to_dict()
    assert MeasureRecord.from_dict(json.loads(json.dumps(d))).settings[0]["requests"] == 2
    with pytest.raises(StatusError, match="accept_length"):
        MeasureRecord.from_dict({**d, "settings": [{"setting": "3/1/4", "accept_length": -1.0}]})


def test_each_settings_server_is_plain_sglang_and_the_cpu_lane_serves_with_its_speculative_attention():
    cfg = from_dict({"job": {"model": "/m"}, "server": {"backend": "sglang", "python": "/py", "extra_args": [
        "--device", "cpu", "--attention-backend", "torch_native", "--max-running-requests", "4"]}})  # fmt: skip
    alone = serving.argv(cfg, "/draft", NONE)
    assert alone[:3] == ["/py", "-m", "sglang.launch_server"] and "EAGLE3" not in alone
    assert "torch_native" not in alone and alone[-4:] == serving.SPECULATIVE
    drafted = serving.argv(cfg, "/draft", "3/1/4")
    assert drafted[drafted.index("--speculative-draft-model-path") + 1] == "/draft"
    assert drafted[drafted.index("--speculative-eagle-topk") + 1] == "1"
    gpu = from_dict({"job": {"model": "/m"}, "server": {"extra_args": ["--attention-backend", "fa3"]}})
    assert "fa3" in serving.argv(gpu, "/draft", "5/4/8")  # a GPU box keeps its own attention


def test_the_prompt_is_the_turns_before_the_first_answer():
    row = {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "hi"},
                             {"from": "gpt", "value": "hello"}, {"from": "human", "value": "more"}]}  # fmt: skip
    assert plan.user_turns(row) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    for bad in ({"conversations": [{"role": "assistant", "content": "x"}]}, {"conversations": "x"},
                {"conversations": [{"role": ["user"], "content": "x"}]}, {"input_ids": [1]}):  # fmt: skip
        assert plan.user_turns(bad) is None
    assert os.path.basename(plan.NAME) == "prompts.json"


def test_the_exports_serve_command_is_the_one_the_measurement_runs_with_the_lanes_flags(tmp_path):
    """The command `train export` says is `serve.plain`'s at SGLang's own setting: on the CPU lane
    with its speculative attention (the bare flags fail there), else SGLang's flags alone."""
    from runner.train import exporter

    cfg = from_dict({"job": {"model": str(tmp_path)}, "server": {"backend": "sglang", "python": "/py",
                     "extra_args": ["--device", "cpu", "--attention-backend", "torch_native"]}})  # fmt: skip
    said = exporter.serve_command(cfg, "/draft")
    assert said == serving.command(cfg, "/draft", "/".join(map(str, exporter.default_setting(cfg))))
    assert " ".join(serving.SPECULATIVE) in said and "--speculative-draft-model-path /draft" in said
    bare = exporter.serve_command(dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, backend="reference")),
                                  "/draft")  # fmt: skip
    assert bare.startswith("python -m sglang.launch_server --model-path ") and "intel_amx" not in bare


@pytest.mark.parametrize("key", ["A;rm -rf /", "1ST", "", "X Y", "é", "OK"])
def test_a_server_env_key_that_is_no_name_is_refused_and_a_value_is_quoted_in_the_shown_command(
    tmp_path, key
):
    """[server] env goes into the serve command operators copy (issue 47): its keys were unquoted."""
    conf = {"job": {"model": str(tmp_path)}, "server": {"backend": "sglang", "env": {key: "a b; c"}}}
    if key != "OK":
        with pytest.raises(ConfigError, match=r"\[server\] env: .* is not a name of letters, digits and _"):
            from_dict(conf)
        return
    assert serving.command(from_dict(conf), "/draft", "3/1/4").startswith("OK='a b; c' ")
    with pytest.raises(ConfigError, match="a table of strings"):
        from_dict({"server": {"env": {"OK": 3}}})


def test_a_named_draft_others_may_write_is_refused_before_roots_sglang_loads_it(tmp_path):
    """[measure] draft names a folder root's SGLang loads (issue 47): checked as the trainer's
    interpreter is, its owner and who may write it and every folder above it."""
    from runner.measure import control

    shared = tmp_path / "shared"
    (shared / "draft").mkdir(parents=True)
    (shared / "draft" / "config.json").write_text("{}")
    conf = {"job": {"model": str(tmp_path / "model"), "out": str(tmp_path / "out")}, "server": {"backend": "sglang"},
            "measure": {"draft": str(shared / "draft")}}  # fmt: skip
    os.chmod(shared, 0o777)  # anyone may swap the draft for their own
    said = control.start(from_dict(conf))
    assert said.code == 3 and "[measure] draft" in said.text and "others may write" in said.text, said.text
    os.chmod(shared, 0o755)
    assert control._cheap(from_dict(conf), str(tmp_path / "run")) is None  # its own folder: served


def test_a_stop_while_a_server_loads_ends_the_wait_at_once_and_the_server(tmp_path, monkeypatch):
    """A big target's server loads for many minutes: a stop (SIGTERM's flag) ends the wait at the
    next poll and the server with it, not after its load or its start timeout."""
    import asyncio
    import sys

    from runner.measure.supervisor import Measure
    from runner.ports import free_port
    from runner.serve import pidfile

    never = [sys.executable, "-c", "import time; time.sleep(600)"]  # a server that never gets ready
    monkeypatch.setattr(serving, "argv", lambda *a: never)
    cfg = from_dict({"job": {"model": str(tmp_path)}, "server": {"backend": "sglang", "port": free_port(),
                     "start_timeout_s": 600.0}})  # fmt: skip
    m = Measure(str(tmp_path), cfg, "/draft")

    async def go() -> None:
        task = asyncio.create_task(m._setting(NONE, [{"input_ids": [1, 2]}], {}))
        while not os.path.exists(tmp_path / "server.pid"):
            await asyncio.sleep(0.05)
        m.stop_asked = True
        await asyncio.wait_for(task, 120)  # not the 600 s start timeout

    asyncio.run(go())
    assert pidfile.live(str(tmp_path / "server.pid")) is None  # the loading server is gone
    assert m.rec.d["phase"] == "starting_server" and not os.path.exists(tmp_path / "results.jsonl")


def test_the_prompts_are_the_trainings_held_out_rows_when_it_holds_some(tmp_path, demo_assets):
    """A draft measured on rows it trained on accepts more than on a new prompt: the training's
    eval split names the rows it never saw (split.json, by their sample files)."""
    job = {
        "model": str(demo_assets / "model"),
        "dataset": str(demo_assets / "data.jsonl"),
        "out": str(tmp_path / "out"),
    }
    cfg = from_dict({"job": job, "measure": {"samples": 3}})
    first = plan.make(cfg)
    assert [p["row"] for p in first["prompts"]] == [0, 1, 2] and first["rows"] == "its first rows"
    os.makedirs(tmp_path / "out-train")
    held = ["rows_0-2000/data_11.ckpt", "rows_0-2000/data_3.ckpt.gz", "rows_0-2000/data_7.ckpt", "notes.txt"]
    (tmp_path / "out-train" / "split.json").write_text(json.dumps({"eval": held}))
    chosen = plan.make(cfg)
    assert [p["row"] for p in chosen["prompts"]] == [3, 7, 11] and chosen[
        "rows"
    ] == "the training's held-out rows"
    assert chosen["prompts"][0]["input_ids"] != first["prompts"][0]["input_ids"]


def test_a_row_the_server_would_refuse_is_passed_over_by_the_plan_and_named(tmp_path, demo_assets):
    """An over-long prompt fixed in the plan was refused at every resume, and the run with it
    (issue 47): the plan passes over what cannot be a prompt, each named with its reason, and the
    status says it."""
    rows = [json.loads(x) for x in open(demo_assets / "data.jsonl")][:2]
    long = {"conversations": [{"role": "user", "content": " ".join(["lo"] * 400)}]}
    huge = {"conversations": [{"role": "user", "content": "ka " * 4000}]}
    lines = [json.dumps(rows[0]), json.dumps(long), json.dumps(huge), "{not json", '{"score": NaN}',
             json.dumps(rows[1])]  # fmt: skip
    data = tmp_path / "data.jsonl"
    data.write_text("".join(x + "\n" for x in lines))
    job = {"model": str(demo_assets / "model"), "dataset": str(data), "out": str(tmp_path / "out"),
           "max_length": 256, "max_row_bytes": 10000}  # fmt: skip
    made = plan.make(from_dict({"job": job, "measure": {"samples": 2, "max_new_tokens": 16}}))
    assert [p["row"] for p in made["prompts"]] == [0, 5] and made["skipped"] == 4
    why = {p["row"]: p["reason"] for p in made["passed_over"]}
    assert "tokens: with [measure] max_new_tokens 16, past [job] max_length 256" in why[1]
    assert "over the 10000-byte row limit" in why[2] and "bad JSON" in why[3] and "NaN" in why[4]
    rec = MeasureRecord.from_dict({"phase": "measuring", "started_at": "2026-12-01T12:00:00Z", "total": 4,
                                   "passed_over": 4, "passed_over_first": f"row 1: {why[1]}"})  # fmt: skip
    assert (
        "4 rows of the dataset passed over, not measured (the first: row 1: its prompt is"
        in render_measure(rec)
    )


def test_the_streamed_answer_is_read_event_by_event_whatever_its_chunks_and_length():
    """SGLang's streamed /generate: ``data: {json}`` events to ``data: [DONE]``, cut anywhere by the
    network; one event past aiohttp's 64 KiB line limit (a long answer's logprobs) reads whole, and
    an error event fails the request rather than count as an answer."""
    import asyncio

    import aiohttp

    from runner.measure.supervisor import _events

    class Content:
        def __init__(self, data: bytes, cut: int):
            self.parts = [data[i : i + cut] for i in range(0, len(data), cut)]

        async def iter_any(self):
            for p in self.parts:
                yield p

    big = {"output_ids": list(range(20000)), "meta_info": {"completion_tokens": 20000}}
    stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in ({"output_ids": [1]}, big))
    stream += b"data: [DONE]\n\n"

    async def read(data: bytes, cut: int) -> list:
        return [e async for e in _events(Content(data, cut))]

    for cut in (7, 4096, len(stream)):
        got = asyncio.run(read(stream, cut))
        assert got == [{"output_ids": [1]}, big], cut
    assert asyncio.run(read(b'data: {"a": 1}\n\ndata: {"b": 2}\n\ndata: [DONE]\n\n', 1)) == [
        {"a": 1},
        {"b": 2},
    ]
    with pytest.raises(aiohttp.ClientPayloadError, match="answered an error"):
        asyncio.run(read(b'data: {"output_ids": [1]}\n\ndata: {"error": {"message": "too long"}}\n\n', 5))
    with pytest.raises(aiohttp.ClientPayloadError, match="not JSON"):
        asyncio.run(read(b"data: {oops\n\n", 3))


def test_a_request_failing_beside_a_live_server_is_sent_once_more_then_is_its_own_failure(tmp_path):
    """A real HTTP server whose /generate drops the first connection: the request is sent again
    (its server answers /health) and kept; one that drops every time is the request's failure,
    naming it, without a restart (the server lives); test_failed_requests writes it and goes on."""
    import asyncio

    import aiohttp
    from aiohttp import web

    from runner.measure.supervisor import Measure, RequestFailed

    asked, mode = [], {"always": False}

    async def generate(request):
        asked.append(request.path)
        if len(asked) == 1 or mode["always"]:
            request.transport.close()  # the connection dropped mid-answer
            return web.Response()
        return web.Response(text='data: {"output_ids": [4, 5], "meta_info": {"completion_tokens": 2}}\n\n'
                                 "data: [DONE]\n\n")  # fmt: skip

    async def health(_):
        return web.Response(text="ok")

    class Live:
        url = ""

        def alive(self):
            return True

    async def go(always: bool):
        mode["always"] = always
        app = web.Application()
        app.add_routes([web.post("/generate", generate), web.get("/health", health)])
        runner_ = web.AppRunner(app)
        await runner_.setup()
        site = web.TCPSite(runner_, "127.0.0.1", 0)
        await site.start()
        live = Live()
        live.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        m = Measure(str(tmp_path), from_dict({"job": {"model": str(tmp_path)}}), "/draft")
        try:
            async with aiohttp.ClientSession() as http:
                return await m._answer(http, live, "3/1/4", 0, [1, 2]), m
        finally:
            await runner_.cleanup()

    row, m = asyncio.run(go(False))
    assert row["output_ids"] == [4, 5] and len(asked) == 2 and not m.rec.d.get("restarts")
    asked.clear()
    with pytest.raises(RequestFailed, match=r"request 0 at 3/1/4: .*\(failed 2 times, its server alive\)"):
        asyncio.run(go(True))
    assert len(asked) == 2


def test_a_multimodal_wrappers_server_is_text_only_as_the_dumps_is(tmp_path):
    """Kimi-K2.5's wrapper: without SGLang's language_model_only override its server dies at start
    (TikTokenTokenizer has no media_processor), with the draft or without; found serving the
    kimi-k2.5 fixture with an EAGLE-3 draft on the CPU lane."""
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {}, "vision_config": {}}))
    cfg = from_dict(
        {"job": {"model": str(tmp_path)}, "server": {"backend": "sglang", "extra_args": ["--device", "cpu"]}}
    )
    for setting in (NONE, "3/1/4"):
        argv = serving.argv(cfg, "/draft", setting)
        flag = argv.index("--json-model-override-args")
        assert json.loads(argv[flag + 1]) == {"language_model_only": True}, argv
    assert "--json-model-override-args" in serving.command(cfg, "/draft", "3/1/4")
