"""Servers that misbehave on purpose, started by the runner's real lifecycle code in place
of a backend (``[server] python`` points at a wrapper that runs this with a mode).

Modes: never_ready, bad_dump (ready, but the dump has the wrong shape), die_on_request,
good_once (one well-shaped dump of zeros, then it dies on the next request),
dies_first_start (exits during its first start, then serves well-shaped zeros), flaky (every
second request writes its data file but no sidecar, as a server that died mid-dump),
failing (every second request answers with a failure note instead of a dump), late (answers
first, writes the dump a moment later, as the patched SGLang's writer threads do)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time


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
    from aiohttp import web

    from runner.contract import dump

    dump_dir = os.environ[dump.DUMP_DIR_ENV]

    served = []

    async def generate(request):
        body = await request.json()
        if mode == "die_on_request" or (mode == "good_once" and served):
            os._exit(3)
        served.append(1)
        import torch

        from runner.contract.ckpt import write_sample

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

    async def ready(_app):
        say = lambda: print("The server is fired up and ready to roll!", flush=True)  # noqa: E731
        asyncio.get_running_loop().call_later(0.2, say)

    app.on_startup.append(ready)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
