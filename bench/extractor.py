"""Extractor throughput against a server that serves C requests at once with a fixed
latency L (capacity C/L samples/s), through the real extractor code path: HTTP request,
dump sidecar, atomic commit, manifest. The sequential baseline (one request in flight)
scores 1/C in the same run.

    python -m bench.extractor [--capacity 16] [--latency-ms 50] [--samples 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time

from aiohttp import web

from runner.contract import dump
from runner.contract.config import Config
from runner.data.dataset import Dataset
from runner.job.extractor import Extractor
from runner.job.record import Recorder
from runner.output.ranks import RunPaths
from runner.output.store import Store
from runner.ports import free_port


class FixedLatencyServer:
    """C slots, L seconds each; writes a small dump file + sidecar like a real backend."""

    def __init__(self, dump_dir: str, capacity: int, latency_s: float):
        self.dump_dir, self.capacity, self.latency_s = dump_dir, capacity, latency_s
        self.served = 0

    async def generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        async with self.sem:
            t0 = time.monotonic()
            rid, n = body["rid"], len(body["input_ids"])
            # the dump without fsync: the latency stays the fixed L this bench is about
            with open(dump.data_path(self.dump_dir, rid), "wb") as f:
                f.write(b"x" * 4096)
            with open(dump.sidecar_path(self.dump_dir, rid) + ".part", "w") as f:
                json.dump({"rid": rid, "seq": n, "bytes": 4096, "checksum": "0"}, f)
            os.replace(dump.sidecar_path(self.dump_dir, rid) + ".part", dump.sidecar_path(self.dump_dir, rid))
            await asyncio.sleep(max(0.0, self.latency_s - (time.monotonic() - t0)))
        return web.json_response({"meta_info": {"id": rid, "prompt_tokens": n}})

    def serve(self, port: int) -> None:
        """In its own process, so the server never competes with the extractor for the GIL."""
        import multiprocessing

        ready = multiprocessing.Event()
        self.proc = multiprocessing.Process(target=self._serve, args=(port, ready), daemon=True)
        self.proc.start()
        ready.wait(30)

    def _serve(self, port: int, ready) -> None:
        async def main():
            self.sem = asyncio.Semaphore(self.capacity)
            app = web.Application()
            app.add_routes([web.post("/generate", self.generate)])
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            ready.set()
            await asyncio.Event().wait()

        asyncio.run(main())


class _Tok:
    def __len__(self) -> int:
        return 1000


class _Server:
    def __init__(self, url: str):
        self.url, self.proc, self.restarts = url, None, 0

    def alive(self) -> bool:
        return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--capacity", type=int, default=16)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="hsx-bench-", dir=a.dir)
    try:
        cap = a.capacity / (a.latency_ms / 1000)
        results = {}
        plans = ((1, max(50, a.samples // a.capacity)), (a.capacity, a.samples), (2 * a.capacity, a.samples))
        for conc, n in plans:
            out = tempfile.mkdtemp(dir=work)
            srv = FixedLatencyServer(os.path.join(out, "o", ".tmp"), a.capacity, a.latency_ms / 1000)
            port = free_port()
            srv.serve(port)
            results[conc] = _run_into(out, port, n, conc)
            srv.proc.terminate()
        print(f"capacity: {a.capacity} slots x {a.latency_ms:g} ms = {cap:.1f} samples/s")
        for conc, r in results.items():
            print(f"in flight {conc:>3}: {r:8.1f} samples/s  = {r / cap:.3f} of capacity")
        print(
            f"bench/README.md: | extractor ÷ capacity (C={a.capacity}, {a.latency_ms:g} ms) | sequential {results[1] / cap:.3f} "
            f"| in flight C {results[a.capacity] / cap:.3f} | in flight 2C {results[2 * a.capacity] / cap:.3f} |"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_into(out: str, port: int, samples: int, concurrency: int) -> float:
    data = os.path.join(out, "data.jsonl")
    with open(data, "w") as f:
        for i in range(samples):
            f.write(json.dumps({"input_ids": [1 + i % 500] * 64}) + "\n")
    cfg = Config()
    cfg.job.concurrency = concurrency
    store = Store(os.path.join(out, "o"))
    store.prepare()
    rec = Recorder(RunPaths(store.out), "bench", samples, 30.0)
    ds = Dataset(data, _Tok(), 4096)
    ext = Extractor(cfg, ds, store, rec, _Server(f"http://127.0.0.1:{port}"), store.tmp)
    t = time.perf_counter()
    asyncio.run(ext.run(list(range(samples))))
    dt = time.perf_counter() - t
    assert rec.record.done == samples, (rec.record.done, samples, rec.record.last_error)
    return samples / dt


if __name__ == "__main__":
    main()
