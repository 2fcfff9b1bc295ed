"""A request that fails on its own is the request's failure, not the run's (issue 47): refused by
the server (a 4xx: the same at every try, so asked once) or failing twice beside a live server (an
error event, say), it is written to results.jsonl with its reason, counted in the status and never
sent again; the others are measured and the run ends done. Against a real HTTP server in this
process that streams as SGLang's /generate does; the server's lifecycle is the extraction's own,
tested with it."""

from __future__ import annotations

import asyncio
import json
import os

from aiohttp import web

from runner.contract.config import from_dict
from runner.contract.measure import NONE, MeasureRecord
from runner.measure import results, supervisor
from runner.measure.supervisor import Measure
from runner.text.measure import render_measure

PROMPTS = [{"input_ids": [1, 2, 3]}, {"input_ids": [9] * 5000}, {"input_ids": [4, 5]}, {"input_ids": [6]},
           {"input_ids": [7]}]  # fmt: skip


async def _generate(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    ids = body["input_ids"]
    if len(ids) > 1000:  # as SGLang refuses an input past its context length
        return web.json_response({"error": {"message": "input is longer than the context"}}, status=400)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if ids == [6]:  # its error event, on every try
        await resp.write(b'data: {"error": {"message": "the scheduler failed this request"}}\n\n')
    elif ids == [7]:  # an answer of the wrong shape: its meta_info a string
        await resp.write(b'data: {"output_ids": [7, 8], "meta_info": "oops"}\n\n')
    else:
        meta = {"completion_tokens": 2, "prompt_tokens": len(ids)}
        await resp.write(b"data: " + json.dumps({"output_ids": [7, 8], "meta_info": meta}).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    return resp


def test_a_refused_or_failing_request_is_written_with_its_reason_and_the_run_goes_on(tmp_path, monkeypatch):
    async def go() -> dict:
        app = web.Application()
        app.router.add_post("/generate", _generate)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

        class Up:
            """The server as ``_setting`` sees it once up: its URL, and a stop."""

            def __init__(self, *a, **kw):
                self.url = url

            def stop(self) -> None:
                pass

        try:
            m = Measure(str(tmp_path), cfg, "/draft")

            async def up(server):
                return None

            async def alive(http, server):
                return False

            monkeypatch.setattr(m, "up", up)
            monkeypatch.setattr(supervisor, "Server", Up)
            monkeypatch.setattr(supervisor.served, "died", alive)
            monkeypatch.setattr(m, "_top_two", lambda *a: asyncio.sleep(0, None))
            done: dict = {}
            await m._setting(NONE, PROMPTS, done)
            m._figures(done)
            return m.rec.d
        finally:
            await runner.cleanup()

    cfg = from_dict({"job": {"model": str(tmp_path)}, "measure": {"settings": ["3/1/4"]}})
    rec = asyncio.run(go())
    done = results.read(str(tmp_path / "results.jsonl"))
    assert sorted(done) == [(NONE, i) for i in range(5)]  # each written, none to send again
    assert "the server refused it" in done[(NONE, 1)]["error"] and "400" in done[(NONE, 1)]["error"]
    assert (
        "the server answered an error" in done[(NONE, 3)]["error"]
        and "failed 2 times" in done[(NONE, 3)]["error"]
    )
    assert "the server's answer is malformed" in done[(NONE, 4)]["error"]
    assert rec["failed"] == 3 and rec["done"] == 5
    assert rec["settings"][0]["requests"] == 2  # the figures count the answers only
    text = render_measure(MeasureRecord.from_dict({**rec, "started_at": "2026-12-01T12:00:00Z"}))
    assert "3 requests failed on their own, not measured again (the last: request " in text


def test_the_restart_cap_is_per_launch_so_a_resume_after_it_was_spent_gets_its_own(tmp_path):
    """The record counts a run's restarts over its whole life; the cap counted them too, so after
    [server] max_restarts deaths in all every resume failed at its first death (issue 47)."""
    from runner.job.served import Served
    from runner.measure import record

    class Dead:
        def stop(self) -> None:
            pass

    rec = record.KIND.load(str(tmp_path))
    rec.update(phase="measuring", restarts=2, last_death="an earlier launch's")  # its cap spent then
    launch = Served(from_dict({"job": {"model": str(tmp_path)}, "server": {"max_restarts": 2}}), rec)
    said = [asyncio.run(launch.again(Dead(), f"death {k}")) for k in range(3)]
    assert said == [True, True, False] and rec.d["restarts"] == 4 and rec.d["last_death"] == "death 1"


def test_a_result_line_past_a_mebibyte_is_read_back_and_not_measured_again(tmp_path):
    """A long answer's line (its top logprobs at every token) ran past the line reader's 1 MiB
    bound, was passed over and its request measured again at every resume (issue 47)."""
    path = str(tmp_path / "results.jsonl")
    top = [[[-0.1, 5, "x" * 40], [-2.3, 6, "y" * 40]]] * 12000  # about 1.3 MB of JSON
    row = {"setting": NONE, "prompt": 0, "output_ids": [5] * 12000, "meta_info": {"completion_tokens": 12000},
           "latency_s": 1.0, "top_logprobs": top}  # fmt: skip
    results.append(path, row)
    assert os.path.getsize(path) > 1 << 20
    assert list(results.read(path)) == [(NONE, 0)]
