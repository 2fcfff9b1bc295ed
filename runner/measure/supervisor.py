"""The detached process that measures: it holds the run's lock, and for the target alone and
then each setting brings up a fresh server (the extraction's lifecycle: readiness, restarts up to
[server] max_restarts, its shared memory cleaned), sends the prompts not yet in results.jsonl one
at a time (streamed: the first event's arrival is its time to the first token; the target
alone's top two logprobs asked apart, untimed), and writes each answer whole before the next. SIGTERM stops it between requests, or
at once while a server loads.

``python -m runner.measure.supervisor RUN_DIR CONFIG``
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import asdict

import aiohttp

from ..contract.config import Config
from ..contract.errors import ServerError
from ..contract.measure import NONE, RESULTS
from ..contract.status import now_iso
from ..job import served
from ..job.served import Served, Stopped
from ..output.ranks import RunPaths  # the server's log, pid and shared memory, as a job's
from ..serve import plain
from ..serve.server import Server
from . import plan, record, results

MAX_EVENT = 64 << 20  # one streamed event this long is no answer of [measure] max_new_tokens


async def _events(content):
    """The JSON of each ``data:`` event of SGLang's streamed /generate, to ``[DONE]``. Split here, not
    by aiohttp's lines, which refuse one past 64 KiB (a long answer's logprobs); one past
    MAX_EVENT fails the request, never the box's memory."""
    buf = bytearray()
    async for chunk in content.iter_any():
        seen = max(0, len(buf) - 1)  # the end already searched: a long event is not searched again
        buf += chunk
        if len(buf) > MAX_EVENT:
            raise aiohttp.ClientPayloadError(f"the server sent an event past {MAX_EVENT} bytes")
        while (end := buf.find(b"\n\n", seen)) >= 0:
            data = bytes(buf[:end]).strip().removeprefix(b"data:").strip()
            del buf[: end + 2]
            seen = 0
            if data == b"[DONE]":
                return
            if not data:
                continue
            try:
                got = json.loads(data)
            except ValueError:
                raise aiohttp.ClientPayloadError(
                    f"the server sent an event that is not JSON: {data[:200]!r}"
                ) from None
            if not isinstance(got, dict) or "error" in got:  # its error event: this request failed
                raise aiohttp.ClientPayloadError(f"the server answered an error: {str(got)[:300]}")
            yield got


REQUEST_TRIES = 2  # a request failing beside a live server is sent this often in all


class RequestFailed(Exception):
    """This request's own failure (the server refused it, or it failed REQUEST_TRIES times beside a
    live server): written as its result, with the reason, and never sent again."""


FIGURES_S = 5.0  # the record's figures at most this often (and at each setting's end): thousands of requests


class Measure(Served):
    def __init__(self, root: str, cfg: Config, draft: str):
        super().__init__(cfg, record.KIND.load(root))
        self.root, self.draft = root, draft
        self.results = os.path.join(root, RESULTS)
        self.settings = [NONE, *cfg.measure.settings]
        self.failing = 0  # requests failed in a row

    def _figures(self, done: dict) -> None:
        figs = results.figures(done, self.cfg.measure.settings)
        spec = [f for f in figs[1:] if f.accept_length is not None]
        best = max(spec, key=lambda f: (f.speedup or 0.0, f.accept_length)) if spec else None
        errors = [r for r in done.values() if "error" in r]
        last = max(errors, key=lambda r: str(r.get("at"))) if errors else None
        self.rec.update(
            failed=len(errors), last_error=f"request {last['prompt']} at {last['setting']}: {last['error']}"[:500]
            if last else None,
            done=len(done), settings=[asdict(f) for f in figs],
            accept_length=best.accept_length if best else None, best=best.setting if best else None,
            serve_command=plain.command(self.cfg, self.draft, best.setting) if best else None,
        )  # fmt: skip

    async def _ask(self, http, server: Server, setting: str, idx: int, ids: list[int]) -> dict:
        m = self.cfg.measure
        body = {
            "input_ids": ids,
            "sampling_params": {"temperature": m.temperature, "max_new_tokens": m.max_new_tokens},
        }
        t0 = time.monotonic()
        ttft, got = None, None
        async with http.post(server.url + "/generate", json={**body, "stream": True}) as r:
            r.raise_for_status()
            async for event in _events(r.content):
                ttft = time.monotonic() - t0 if ttft is None else ttft
                got = event  # each says the whole output so far; the last, with its meta_info, ends it
        if got is None:
            raise aiohttp.ClientPayloadError("the server ended its answer without an event")
        ids, meta = got.get("output_ids") or [], got.get("meta_info") or {}
        if not (isinstance(ids, list) and all(type(t) is int for t in ids) and isinstance(meta, dict)):
            raise aiohttp.ClientPayloadError(f"the server's answer is malformed: {str(got)[:200]}")
        row = {"setting": setting, "prompt": idx, "output_ids": ids, "meta_info": meta, "latency_s": time.monotonic() - t0, "ttft_s": ttft,
               "at": now_iso()}  # fmt: skip
        if setting == NONE:
            row["top_logprobs"] = await self._top_two(http, server, body, row["output_ids"])
        return row

    async def _top_two(self, http, server: Server, body: dict, output_ids: list) -> list | None:
        """The target alone's top two at each token (a later difference is judged a near-tie or
        not), asked after the timed request and not in it: the logprobs would slow the baseline
        alone, and streamed they are sent again whole with every event. None where that answer's
        tokens differ from the timed one's (its margins would be of another text)."""
        async with http.post(server.url + "/generate", json={**body, "return_logprob": True,
                                                             "top_logprobs_num": 2}) as r:  # fmt: skip
            r.raise_for_status()
            got = await r.json()
        got = got[0] if isinstance(got, list) and got else got
        if not isinstance(got, dict) or got.get("output_ids") != output_ids:
            return None
        return (got.get("meta_info") or {}).get("output_top_logprobs")

    async def _answer(self, http, server: Server, setting: str, i: int, ids: list[int]) -> dict:
        """Request ``i``'s answer. A server that died meanwhile is started again (counted, its
        death named) and asked again; a request that fails beside a live server is sent once more."""
        failed = 0
        while True:
            try:
                return await self._ask(http, server, setting, i, ids)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                why = f"request {i} at {setting}: {type(e).__name__}: {str(e)[:300]}"
                if isinstance(e, aiohttp.ClientResponseError) and 400 <= e.status < 500:
                    raise RequestFailed(f"the server refused it: {why}") from None  # the same at every try
                if await served.died(http, server):
                    await self.restart(server, why)
                    continue
                failed += 1
                if failed >= REQUEST_TRIES:
                    raise RequestFailed(f"{why} (failed {failed} times, its server alive)") from None

    async def _setting(self, setting: str, prompts: list[dict], done: dict) -> None:
        todo = [i for i in range(len(prompts)) if (setting, i) not in done]
        if not todo:
            return
        server = Server(self.cfg, [], "", RunPaths(self.root), argv=plain.argv(self.cfg, self.draft, setting),
                        env=plain.env(self.cfg))  # fmt: skip
        self.rec.update(setting=setting)
        try:
            await self.up(server)
            self.rec.update(phase="measuring", server_activity="ready")
            self.rec.write()
            timeout = aiohttp.ClientTimeout(total=self.cfg.job.request_timeout_s)
            said = time.monotonic()
            async with aiohttp.ClientSession(timeout=timeout) as http:
                for i in todo:
                    if self.stop_asked:
                        return
                    try:
                        row = await self._answer(http, server, setting, i, prompts[i]["input_ids"])
                        self.failing = 0
                    except RequestFailed as e:
                        row = {"setting": setting, "prompt": i, "error": str(e), "at": now_iso()}
                        self.failing += 1
                        if self.failing >= self.cfg.job.max_consecutive_failures:  # the server, not them
                            raise ServerError(
                                f"{self.failing} requests in a row failed; the last: {e}"
                            ) from None
                    results.append(self.results, row)
                    done[(setting, i)] = row
                    if time.monotonic() - said >= FIGURES_S or i == todo[-1]:  # each pass reads every line
                        self._figures(done)
                        said = time.monotonic()
                    else:
                        self.rec.update(done=len(done))
                    self.rec.write()
        except Stopped:
            return
        finally:
            await asyncio.to_thread(server.stop)

    async def run(self) -> str:
        made = plan.load_or_make(self.root, self.cfg)
        prompts, passed = made["prompts"], made.get("passed_over") or []
        done = results.read(self.results)
        self.rec.update(total=len(prompts) * len(self.settings), results=self.results, export_dir=self.draft,
                        passed_over=int(made.get("skipped") or 0),
                        passed_over_first=f"row {passed[0]['row']}: {passed[0]['reason']}" if passed else None)  # fmt: skip
        self._figures(done)
        try:
            for setting in self.settings:
                await self._setting(setting, prompts, done)
                if self.stop_asked:
                    return "stopped"
            return "done"
        finally:  # however it ends, the figures of every line written
            self._figures(done)


def main(argv: list[str]) -> int:
    return served.main(
        argv, lambda root, cfg: Measure(root, cfg, record.KIND.load(root).d.get("export_dir") or "")
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
