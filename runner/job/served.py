"""A supervised run that asks a server (the measurement, the regeneration): the server brought up
with the extraction's lifecycle (readiness, restarts up to [server] max_restarts, each death named
in the record), and after a failed request the question whether that server died."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import aiohttp

from ..contract import timing
from ..contract.config import Config, load
from ..contract.errors import JobFailed, ServerError, ServerExited
from ..contract.status import now_iso
from ..output.lock import JobLock
from ..serve.server import Server
from .supervised import Record

DEATH_S = 30.0  # a failed request's server: how long its end or its health may take to show


class Stopped(Exception):
    """A stop asked while a server loads (minutes on a big target): the wait ends at once."""


class Served:
    def __init__(self, cfg: Config, rec: Record):
        self.cfg, self.rec = cfg, rec
        self.stop_asked = False
        self.restarted = 0  # this launch's restarts: the cap is per launch, as the extraction's

    def on_term(self, *_) -> None:
        self.stop_asked = True

    async def up(self, server: Server) -> None:
        """Started and ready; one that dies while starting is started again, counted."""
        while True:
            await server.start()
            self.rec.update(phase="starting_server", server_since=now_iso(), server_activity="launching")
            self.rec.write()
            try:
                await server.wait_ready(lambda: self.said(server))
                return
            except ServerExited as e:
                if not await self.again(server, f"server died during start-up: {str(e)[:300]}"):
                    raise ServerError(
                        f"restart cap {self.cfg.server.max_restarts} spent; last: {e}"
                    ) from None

    def said(self, server: Server) -> None:
        if self.stop_asked:
            raise Stopped
        if server.activity != self.rec.d.get("server_activity"):
            self.rec.update(server_activity=server.activity)
            self.rec.write()

    async def again(self, server: Server, why: str) -> bool:
        """A restart, if this launch's cap allows one (the record counts the run's whole life; a
        resume after the cap was spent gets its own): counted and its cause kept; the old server
        ended. A stop asked meanwhile is no death (Slurm's scancel signals the server with this
        process): Stopped, nothing counted."""
        if self.stop_asked:
            raise Stopped
        if self.restarted >= self.cfg.server.max_restarts:
            return False
        await asyncio.to_thread(server.stop)
        if self.stop_asked:
            raise Stopped
        self.restarted += 1
        self.rec.update(restarts=(self.rec.d.get("restarts") or 0) + 1, last_death=why)
        self.rec.write()
        return True

    async def restart(self, server: Server, why: str) -> None:
        """The server died: up again, or ServerError once the cap is spent."""
        if not await self.again(server, f"server died: {server.death_reason() or why}"):
            raise ServerError(f"restart cap {self.cfg.server.max_restarts} spent; {why}") from None
        await self.up(server)


async def died(http, server: Server) -> bool:
    """After a failed request, whether its server died: a killed main process drops its
    connections a moment before it ends, and after a rank's death it lingers a few seconds,
    so this waits up to DEATH_S for its end, or for /health to say it lives."""
    deadline = time.monotonic() + DEATH_S
    while time.monotonic() < deadline:
        if not server.alive():
            return True
        try:
            async with http.get(server.url + "/health", timeout=aiohttp.ClientTimeout(total=5)) as r:
                if r.status == 200:
                    return False
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            pass
        await asyncio.sleep(timing.current().server_poll_s)
    return not server.alive()


def main(argv: list[str], make, lock_name: str = ".lock") -> int:
    """A served run's process: ``python -m MODULE RUN_DIR CONFIG``. It claims the run's lock
    (``lock_name`` in the run dir; LockedError: another supervisor holds it), runs
    ``make(root, cfg)``'s ``run()`` with SIGTERM as a stop, and ends the record with the phase it
    ended in and why."""
    root, config = os.path.abspath(argv[0]), argv[1]
    lock = JobLock(os.path.join(root, lock_name))
    lock.acquire()
    run = make(root, load(config))
    signal.signal(signal.SIGTERM, run.on_term)
    signal.signal(signal.SIGINT, run.on_term)
    rec = run.rec
    rec.update(phase="preflight", pid=os.getpid(), reason="", started_at=rec.d.get("started_at") or now_iso())
    rec.write()
    try:
        end, why = asyncio.run(run.run()), ""
    except JobFailed as e:  # the run's own refusal (a Slurm task past its requeues): its words are the reason
        end, why = "failed", str(e)[:500]
    except Exception as e:  # noqa: BLE001 - said in the record: the reason a failed run ends
        end, why = "failed", f"{type(e).__name__}: {str(e)[:500]}"
    rec.update(
        phase=end, reason=why or ("stopped on request" if end == "stopped" else ""), ended_at=now_iso()
    )
    rec.write()
    lock.release()
    return 0 if end != "failed" else 1
