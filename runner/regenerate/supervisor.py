"""The detached process that regenerates: it holds the run's lock, brings the target's server up
(the extraction's lifecycle: readiness, restarts up to [server] max_restarts), sends each row not
yet in rows.jsonl (``[regenerate] concurrency`` rows in flight; a row's turns in order, each seeing
the target's own earlier answers), and commits each row whole the moment it ends. When every row
is committed it writes the new dataset in input order. SIGTERM stops it at once: rows in flight are
not committed and a resume sends them again.

``python -m runner.regenerate.supervisor RUN_DIR CONFIG [--rank R --world W]``: with a rank, one
Slurm array task's share of the rows (runner/engines/slurm_regenerate.py), its own files
(rows.rankR.jsonl, status.rankR.json, .lock.rankR) and server (port + R); the rank that ends
and finds every rank's record done writes the one output from all their rows.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import sys
import time

import aiohttp

from ..contract.config import Config
from ..contract.errors import JobFailed, ServerError
from ..contract.regenerate import ROWS
from ..contract.status import now_iso
from ..data.dataset import RowError, line_offsets, load_tokenizer, parse_row
from ..job import requeue, served
from ..job.served import Served, Stopped
from ..output import jsonl, ranks
from ..output.jsonl import rank_file
from ..output.ranks import RunPaths  # the server's log, pid and shared memory, as a job's
from ..serve import plain
from ..serve.server import Server
from . import committed, control, record, rows

FIGURES_S = 2.0  # the record's figures at most this often
HISTORY_S = 10.0  # a progress point for the chart this often


def server_for(cfg: Config, root: str, rank: int | None = None) -> Server:
    """The target as [server] serves it: SGLang plain (no dump), or the reference backend."""
    paths = RunPaths(root, rank)
    if cfg.server.backend == "sglang":
        return Server(cfg, [], "", paths, argv=plain.argv(cfg, "", "none"), env=plain.env(cfg))
    return Server(cfg, [], os.path.join(root, rank_file("server-dump", rank)), paths)  # never asked to dump


class Regenerate(Served):
    def __init__(self, root: str, cfg: Config, rank: int | None = None, world: int | None = None):
        super().__init__(ranks.own_port(cfg, rank), record.load(root, rank))
        self.root, self.rank, self.world = root, rank, world
        self.log = os.path.join(root, rank_file(ROWS, rank))
        self.history = os.path.join(root, rank_file(control.HISTORY, rank))
        self.tok = load_tokenizer(cfg.job.tokenizer or cfg.job.model, cfg.job.trust_remote_code)
        self.trim = set(self.tok.all_special_ids)
        self.generation = 0  # the server's: bumped by each restart, so one death restarts it once
        self.restarting = asyncio.Lock()
        self.failures_in_a_row = 0
        self.t0, self.rows_now, self.tokens_now = time.monotonic(), 0, 0
        self.figured_at = self.pointed = 0.0

    # --- one row ---------------------------------------------------------------------------

    def _prompt(self, msgs: list[dict]) -> list[int]:
        kw = {"enable_thinking": False} if self.cfg.regenerate.reasoning == "disable" else {}
        try:
            text = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kw)
        except Exception as e:  # noqa: BLE001 - a template's failure is the row's (role order, say)
            raise RowError(f"chat template failed: {str(e)[:300]}") from None
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def _params(self, i: int, room: int) -> dict:
        r = self.cfg.regenerate
        p = {"max_new_tokens": min(r.max_new_tokens, room), "temperature": r.temperature,
             "top_p": r.top_p, "top_k": r.top_k or -1}  # fmt: skip
        if r.temperature > 0:
            p["sampling_seed"] = r.seed + i
        return p

    async def _answer(
        self, http, server: Server, i: int, turn: int, msgs: list[dict]
    ) -> tuple[str, int, bool]:
        """The target's answer to ``msgs``, its tokens, and whether it ran into its token limit."""
        ids = self._prompt(msgs)
        room = self.cfg.job.max_length - len(ids)
        if room < 1:
            raise RowError(
                f"too long: turn {turn}'s prompt is {len(ids)} tokens, [job] max_length is {self.cfg.job.max_length}"
            )
        body = {"input_ids": ids, "sampling_params": self._params(i, room)}
        tries = 0
        while True:
            gen = self.generation
            try:
                async with http.post(server.url + "/generate", json=body) as resp:
                    if resp.status == 400:  # the server refuses this request: the row's own fault
                        raise RowError(f"the server refused turn {turn}: {(await resp.text())[:300]}")
                    resp.raise_for_status()
                    got = await resp.json()
                out = [t for t in got.get("output_ids") or [] if isinstance(t, int)]
                while out and out[-1] in self.trim:  # the end-of-turn and end-of-sequence ids
                    out.pop()
                text = self.tok.decode(out, skip_special_tokens=False)
                finish = (got.get("meta_info") or {}).get("finish_reason")
                cut = isinstance(finish, dict) and finish.get("type") == "length"
                return (
                    rows.reasoning(text, self.cfg.regenerate.reasoning).strip(),
                    len(got.get("output_ids") or []),
                    cut,
                )
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as e:
                why = f"row {i} turn {turn}: {type(e).__name__}: {str(e)[:300]}"
                async with self.restarting:
                    if gen != self.generation:
                        continue  # another request saw this death; its server is up again
                    if await served.died(http, server):
                        await self.restart(server, why)
                        self.generation += 1
                        continue
                tries += 1
                if tries >= self.cfg.job.retries:
                    raise RowError(f"failed {tries} times, its server alive: {why}") from None

    async def _row(self, http, server: Server, i: int, raws) -> dict:
        rid = None
        try:
            row = parse_row(raws(i))
            rid = row.get("id") if isinstance(row.get("id"), (str, int)) else None
            t = rows.read(row)
            msgs, written, tokens, cut = [], [], 0, 0
            for j in range(len(t.messages) + 1):
                if j in t.answers:
                    text, n, at_limit = await self._answer(http, server, i, len(written) + 1, msgs)
                    written.append(text)
                    tokens, cut = tokens + n, cut + at_limit
                    msgs.append({"role": "assistant", "content": text})
                elif j < len(t.messages):
                    msgs.append(t.messages[j])
            entry = {"row": i, "id": rid, "data": rows.rebuild(t, written), "tokens": tokens}
            return entry | {"cut": cut} if cut else entry  # the turns that ran into their token limit
        except RowError as e:
            return {"row": i, "id": rid, "reason": str(e)}

    # --- the run ---------------------------------------------------------------------------

    def _figures(self, done: committed.Rows, total: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.figured_at < FIGURES_S:
            return
        self.figured_at = now
        spent = now - self.t0
        rate = self.rows_now / spent if self.rows_now and spent > 0 else None
        out = os.path.dirname(self.rec.d.get("output") or self.root)
        try:
            free = shutil.disk_usage(out if os.path.isdir(out) else self.root).free
        except OSError:
            free = None
        self.rec.update(
            done=len(done), total=total, failed=done.failed, tokens=done.tokens, cut=done.cut,
            tokens_per_s=self.tokens_now / spent if self.tokens_now and spent > 0 else None,
            rows_per_s=rate, eta_s=(total - len(done)) / rate if rate else None,
            last_error=f"row {last['row']}: {last['reason']}"[:500] if (last := done.last_failure) else None,
            disk_path=out, disk_free=free,
        )  # fmt: skip
        self.rec.write()
        if now - self.pointed >= HISTORY_S or force:
            self.pointed = now
            point = {"t": now_iso(), "done": len(done), "failed": done.failed,
                     "tokens_per_s": self.rec.d.get("tokens_per_s"), "rows_per_s": rate}  # fmt: skip
            jsonl.append(self.history, json.dumps(point).encode())

    async def _worker(self, http, server, todo, raws, done: committed.Rows, total: int) -> None:
        while todo and not self.stop_asked:
            i = todo.popleft()
            entry = await self._row(http, server, i, raws)
            done.add(i, entry, committed.append(self.log, entry))
            self.rec.update(committed_at=now_iso())
            self.rows_now += 1
            self.tokens_now += int(entry.get("tokens") or 0)
            if "reason" in entry:
                self.failures_in_a_row += 1
                if self.failures_in_a_row >= self.cfg.job.max_consecutive_failures:
                    raise ServerError(
                        f"{self.failures_in_a_row} rows in a row not regenerated; the last: {entry['reason']}"
                    )
            else:
                self.failures_in_a_row = 0
            self._figures(done, total)

    async def _beat(self) -> None:
        """A Slurm rank's heartbeat while it works: read from another node, where its lock tells
        nothing, its record's age says whether it still runs (a server loading for minutes, a
        long answer, are no commits)."""
        while True:
            await asyncio.sleep(self.cfg.job.status_interval_s)
            self.rec.write()

    async def run(self) -> str:
        beat = asyncio.ensure_future(self._beat()) if self.rank is not None else None
        try:
            return await self._run()
        finally:
            if beat is not None:
                beat.cancel()

    async def _run(self) -> str:
        cfg = self.cfg
        n = requeue.count() if self.rank is not None else 0  # a Slurm task: how often it was requeued
        if self.rank is not None:
            self.rec.update(
                requeues=n, requeued_for=requeue.why(os.path.join(self.root, ".slurm"), self.rank, n)
            )
        source = self.rec.d.get("source") or control.source(cfg)
        offsets = line_offsets(source)
        total = len(offsets) - 1
        lo, hi = (0, total) if self.rank is None else ranks.even_range(total, self.rank, self.world)
        share = hi - lo  # a rank's record counts its own rows
        done = committed.read(self.log, hi, lo)
        if self.rank is not None:  # past the budget, or requeued again with nothing done between
            last = self.rec.d.get("requeued_from")
            self.rec.update(requeued_from=len(done) if n else None)
            if why := requeue.stop_reason(cfg, n, len(done), last):
                raise JobFailed(why)
        self.rec.update(
            total=share, source=source, output=control.output(cfg), failures=control.failures(cfg)
        )
        self._figures(done, share, force=True)
        todo = collections.deque(i for i in range(lo, hi) if i not in done)  # popped from the left: O(1)
        if todo:
            f = open(source, "rb")  # noqa: SIM115 - closed below

            def raws(i: int) -> bytes:
                size = offsets[i + 1] - offsets[i]
                if size > cfg.job.max_row_bytes:
                    raise RowError(
                        f"row is {size} bytes, over the {cfg.job.max_row_bytes}-byte row limit ([job] max_row_bytes)"
                    )
                f.seek(offsets[i])
                return f.read(size)

            server = server_for(cfg, self.root, self.rank)
            try:
                await self.up(server)
                self.rec.update(phase="regenerating", server_activity="ready", committed_at=now_iso())
                self.rec.write()
                self.t0 = time.monotonic()
                timeout = aiohttp.ClientTimeout(total=cfg.job.request_timeout_s)
                # aiohttp's own default of 100 connections would cap [regenerate] concurrency
                conn = aiohttp.TCPConnector(limit=cfg.regenerate.concurrency + 2)
                async with aiohttp.ClientSession(timeout=timeout, connector=conn) as http:
                    workers = [self._worker(http, server, todo, raws, done, share)
                               for _ in range(min(cfg.regenerate.concurrency, len(todo)))]  # fmt: skip
                    tasks = [asyncio.ensure_future(w) for w in workers]
                    while not all(t.done() for t in tasks):
                        await asyncio.wait(tasks, timeout=0.2, return_when=asyncio.FIRST_EXCEPTION)
                        if self.stop_asked or any(t.done() and t.exception() for t in tasks):
                            break
                    for t in tasks:
                        t.cancel()  # a row in flight is not committed: a resume sends it again
                    await asyncio.gather(*tasks, return_exceptions=True)
                    for t in tasks:
                        if t.done() and not t.cancelled() and t.exception():
                            raise t.exception()
            except Stopped:
                return "stopped"
            finally:
                f.close()
                self._figures(done, share, force=True)
                await asyncio.to_thread(server.stop)
            if self.stop_asked:
                return "stopped"
        self.rec.update(phase="regenerating", server_activity=None)
        if self.rank is None:
            committed.finish(cfg, source, done, total)
        else:
            self._rank_done(source, total)
        self._figures(done, share, force=True)
        return "done"

    def _rank_done(self, source: str, total: int) -> None:
        """A rank's rows all committed: its record says done first, then it reads the others'.
        Of two ranks ending at once, the later to say done sees the other's, so one of them at
        least writes the output; both may, with the same bytes (committed.finish)."""
        self.rec.update(phase="done")
        self.rec.write()
        committed.finish_ranks(self.cfg, self.root, source, total, ranks.even(total, self.world))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m runner.regenerate.supervisor")
    p.add_argument("run_dir")
    p.add_argument("config")
    p.add_argument("--rank", type=int, default=None, help="a Slurm array task: this rank's share of the rows")
    p.add_argument("--world", type=int, default=None, help="the number of ranks the rows are split into")
    a = p.parse_args(argv)
    if (a.rank is None) != (a.world is None):
        p.error("--rank and --world go together")
    lock = os.path.basename(RunPaths(a.run_dir, a.rank).lock)
    return served.main([a.run_dir, a.config], lambda root, cfg: Regenerate(root, cfg, a.rank, a.world), lock)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
