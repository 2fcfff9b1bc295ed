"""Ranks: one job's samples split into contiguous, shard-aligned ranges.

A rank is an ordinary single-box run restricted to its range, with its own server port, lock,
status record, events and logs, all in the job's one output directory. Ranges follow the
``rows_{g}-{g+2000}`` layout, so no two ranks ever write the same shard directory; a job
therefore has at most as many ranks as shards. The regeneration's ranks write no shard: its rows
are dealt evenly (``even``), at most one rank per row."""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass

from ..contract.config import Config
from ..contract.errors import ConfigError
from ..contract.status import EVENTS, STATUS
from .jsonl import rank_file
from .lock import NAME as LOCK
from .store import SHARD


def shard_count(total: int) -> int:
    return -(-total // SHARD)


def split(total: int, world: int) -> list[tuple[int, int]]:
    """[lo, hi) per rank: shards dealt out evenly, contiguous; min(world, shards) ranks."""
    if world < 1:
        raise ConfigError("the number of ranks must be at least 1")
    shards = shard_count(total)
    n = max(1, min(world, shards))
    cuts = [r * shards // n for r in range(n + 1)]
    return [(cuts[r] * SHARD, min(cuts[r + 1] * SHARD, total)) for r in range(n)]


def rank_range(total: int, rank: int, world: int) -> tuple[int, int]:
    ranges = split(total, world)
    if len(ranges) != world:
        raise ConfigError(
            f"--world {world}: this job has {total:,} samples = {shard_count(total)} shards of {SHARD}, "
            f"so at most {len(ranges)} ranks (a rank never shares a shard directory)"
        )
    if not 0 <= rank < world:
        raise ConfigError(f"--rank {rank} is outside 0..{world - 1}")
    return ranges[rank]


def even(total: int, world: int) -> list[tuple[int, int]]:
    """[lo, hi) per rank of a job whose ranks share no directory (the regeneration's rows):
    contiguous, sizes within one of each other, min(world, total) ranks (one for no rows)."""
    if world < 1:
        raise ConfigError("the number of ranks must be at least 1")
    n = max(1, min(world, total))
    return [(r * total // n, (r + 1) * total // n) for r in range(n)]


def even_range(total: int, rank: int, world: int) -> tuple[int, int]:
    ranges = even(total, world)
    if len(ranges) != world:
        raise ConfigError(f"--world {world}: {total:,} rows are at most {len(ranges)} ranks")
    if not 0 <= rank < world:
        raise ConfigError(f"--rank {rank} is outside 0..{world - 1}")
    return ranges[rank]


def own_port(cfg: Config, rank: int | None) -> Config:
    """A rank's config: its server on [server] port + rank, so ranks sharing a node never collide."""
    if rank is None:
        return cfg
    return dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, port=cfg.server.port + rank))


@dataclass(frozen=True)
class RunPaths:
    """Where one run keeps its own files; rank None gives the single-box names unchanged."""

    out: str
    rank: int | None = None

    def _f(self, name: str) -> str:
        return os.path.join(self.out, rank_file(name, self.rank))

    @property
    def status(self) -> str:
        return self._f(STATUS)

    @property
    def events(self) -> str:
        return self._f(EVENTS)

    @property
    def lock(self) -> str:
        return os.path.join(self.out, LOCK if self.rank is None else f"{LOCK}.rank{self.rank}")

    @property
    def runner_log(self) -> str:
        return os.path.join(self.out, "logs", rank_file("runner.log", self.rank))

    @property
    def crash_log(self) -> str:
        """What a detached runner printed (a traceback, if it died of one)."""
        return os.path.join(self.out, "logs", rank_file("runner.out", self.rank))

    @property
    def server_log(self) -> str:
        return os.path.join(self.out, "logs", rank_file("server.log", self.rank))

    @property
    def server_pid(self) -> str:
        # per host too: a requeued rank on another node must not kill a local pid of that number
        if self.rank is None:
            return os.path.join(self.out, "server.pid")
        return os.path.join(self.out, f"server.rank{self.rank}.{socket.gethostname()}.pid")

    @property
    def server_shm(self) -> str:
        """The server's processes and /dev/shm segments (runner/serve/shm.py); per host, as /dev/shm is."""
        return self.server_pid.removesuffix(".pid") + ".shm.json"
