"""Servers that misbehave on purpose, started by the runner's real lifecycle code in place
of a backend (``[server] python`` points at a wrapper that runs this with a mode), or served
in this process by ``InProcess`` for tests of the extractor alone.

Modes: never_ready, bind_taken (says uvicorn's bind error, then hangs, as SGLang's server does when
its port was taken after hsx checked it), bad_dump (ready, but the dump has the wrong shape), die_on_request,
good_once (one well-shaped dump of zeros, then it dies on the next request),
dies_first_start (exits during its first start, then serves well-shaped zeros), flaky (every
second request writes its data file but no sidecar, as a server that died mid-dump),
failing (every second request answers with a failure note instead of a dump), late (answers
first, writes the dump a moment later, as the patched SGLang's writer threads do), ok."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import threading
import time

from aiohttp import web

# These end the process: a test of them needs a real child (see tests/runner/serve/test_lifecycle.py).
PROCESS_ONLY = ("never_ready", "bind_taken", "dies_first_start", "die_on_request", "good_once")


def make_app(mode: str, dump_dir: str) -> web.Application:
    """/generate and /health, writing dumps into dump_dir as runner/contract/dump.py says."""
    from runner.contract import dump

    served = []

    async def generate(request):
        body = await request.json()
        if mode == "die_on_request" or (mode == "good_once" and served):
            os._exit(3)
        served.append(1)
        import torch

        from runner.codec.ckpt import write_sample

        rid, ids = body["rid"], body["input_ids"]
        n = len(ids) - (mode == "bad_dump")  # bad_dump: one row short, as a radix-cache hit would do
        nbytes, ck = write_sample(
            dump.data_path(dump_dir, rid), input_ids=torch.tensor(ids[:n]), loss_mask=torch.ones(n, dtype=torch.long),
            hidden_state=torch.zeros(1, n, 64, dtype=torch.bfloat16),
            aux_hidden_state=torch.zeros(1, n, 192, dtype=torch.bfloat16),
        )  # fmt: skip
        if mode in ("flaky", "failing") and len(served) % 2 == 0:
            if mode == "failing":
                dump.write_failure(dump_dir, rid, "disk full (fake)")
            return web.json_response({"meta_info": {"id": rid}})
        side = lambda: dump.write_sidecar(dump_dir, rid, {"seq": n, "bytes": nbytes, "checksum": ck})  # noqa: E731
        if mode == "late":
            asyncio.get_running_loop().call_later(0.3, side)
        else:
            side()
        return web.json_response({"meta_info": {"id": rid}})

    async def health(_):
        return web.Response(text="ok")

    app = web.Application()
    app.add_routes([web.post("/generate", generate), web.get("/health", health)])
    return app


class InProcess:
    """The app on a free port, on its own event loop in a thread; shaped like the parts of
    runner.serve.server.Server that the extractor uses (url, alive, restarts, proc)."""

    def __init__(self, mode: str, dump_dir: str):
        if mode in PROCESS_ONLY:
            raise ValueError(f"mode {mode} ends its process: run it as a child")
        self.mode, self.dump_dir = mode, dump_dir
        self.restarts, self.proc = 0, None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-dump-server", daemon=True)
        self._runner: web.AppRunner | None = None

    def __enter__(self) -> InProcess:
        self._thread.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        asyncio.run_coroutine_threadsafe(self._start(port), self._loop).result(30)
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def _start(self, port: int) -> None:
        self._runner = web.AppRunner(make_app(self.mode, self.dump_dir))
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()


def main() -> None:
    mode = sys.argv[1]
    ap = argparse.ArgumentParser()
    ap.add_argument("-m")
    ap.add_argument("--port", type=int)
    args, _ = ap.parse_known_args(sys.argv[2:])
    print("Load weight begin. fake", flush=True)
    if mode == "dies_first_start":  # the first start dies (OOM, CUDA init), the next one serves
        marker = os.path.join(os.environ["HSX_DUMP_DIR"], "..", "first-start-done")
        if not os.path.exists(marker):
            open(marker, "w").close()
            sys.exit(1)
    if mode == "never_ready":
        time.sleep(3600)
    if mode == "bind_taken":  # SGLang 0.5.23's uvicorn, word for word; it then waits in its shutdown
        print(f"[2026-12-05 05:10:01] ERROR:    [Errno 98] error while attempting to bind on address "
              f"('127.0.0.1', {args.port}): address already in use", flush=True)  # fmt: skip
        print("[2026-12-05 05:10:01] INFO:     Waiting for application shutdown.", flush=True)
        time.sleep(3600)
    from runner.contract import dump

    app = make_app(mode, os.environ[dump.DUMP_DIR_ENV])

    async def ready(_app):
        say = lambda: print("The server is fired up and ready to roll!", flush=True)  # noqa: E731
        asyncio.get_running_loop().call_later(0.2, say)

    app.on_startup.append(ready)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
