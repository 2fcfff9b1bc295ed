"""Server lifecycle, the same for both backends: build the command, start it in its own
process group, wait for readiness on three signals together (ready line in its log,
HTTP health, process exit code), restart with a cap, stop with SIGTERM then SIGKILL."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp

from ..contract import dump, timing
from ..contract.config import Config, without_secrets
from ..contract.errors import ServerError, ServerExited
from ..contract.launch import ArgsError, server_argv
from ..contract.status import now_iso
from ..procs import die_with_parent, proc_stat
from ..sglang_cpu import checkout_root
from . import pidfile
from .shm import ShmTracker

if TYPE_CHECKING:
    from ..output.ranks import RunPaths

READY_LINE = "The server is fired up and ready to roll!"
# uvicorn's line when the port is taken; the server then hangs in its shutdown instead of exiting
BIND_RE = re.compile(r"error while attempting to bind on address \(([^)]*)\): ([^\n]*)")
# What a starting server is doing, from its log: weight loading and its progress bars.
ACTIVITY_RE = re.compile(
    r"(Load weight begin.*|Load weight end.*|(?:Multi-thread loading shards|Loading safetensors checkpoint shards):\s*\d+% Completed \| \d+/\d+|Capture cuda graph.*|Init torch distributed.*)"
)


# SGLang's subprocess watchdog, when a scheduler dies: the whole server goes down with it.
CRASHED_RE = re.compile(r"Subprocess (\S+) \(pid=(\d+)\) crashed with exit code (-?\d+)")
# The dump patch, in each scheduler process as it starts (patches/scheduler_patch.py).
RANK_RE = re.compile(r"hsx dump patch installed in (TP\d+) pid (\d+)")
# A server just stopped or killed (this job's, or a dead runner's) lets go of its port within this.
PORT_FREE_S = 5.0


def _how(code: int) -> str:
    """A negative exit code is the signal (Python's convention)."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def death_reason(log_text: str) -> str:
    """Which process of the server died and how, from its log: '' when the log does not say."""
    crashed = CRASHED_RE.findall(log_text)
    if not crashed:
        return ""
    name, pid, code = crashed[-1]
    ranks = {p: r for r, p in RANK_RE.findall(log_text)}
    who = f"{ranks[pid]} scheduler" if pid in ranks else name.replace("_", " ")
    return f"{who} (pid {pid}) died, {_how(int(code))}"


def rank_deaths(ranks: dict[str, int]) -> list[tuple[str, int, str]]:
    """Which of the ranks' scheduler processes are gone, as (rank, pid, how), how while each is
    a zombie yet ('' once reaped): a dead rank soon takes the others down (a collective fails)
    before SGLang's own watchdog logs which one it was, so one killed by a signal is named
    before those that exited after it."""
    dead = []
    for name, pid in sorted(ranks.items()):
        st = proc_stat(pid)
        if st is None:
            dead.append((False, (name, pid, "")))
        elif st[0] == "Z":
            sig, code = st[2] & 0x7F, st[2] >> 8
            dead.append((bool(sig), (name, pid, _how(-sig if sig else code))))
    return [d for signalled, d in dead if signalled] or [d for _, d in dead]


def say_deaths(deaths: list[tuple[str, int, str]], log_text: str = "") -> str:
    """The ranks seen dead, each with how it died; one reaped before it was seen (its status
    gone with it) takes how from SGLang's watchdog line about the same pid, if the log has one."""
    codes = {int(pid): int(code) for _, pid, code in CRASHED_RE.findall(log_text)}
    parts = []
    for name, pid, how in deaths:
        how = how or (_how(codes[pid]) if pid in codes else "")
        parts.append(f"{name} scheduler (pid {pid}) died" + (f", {how}" if how else ""))
    return "; ".join(parts)


def rank_death(ranks: dict[str, int]) -> str:
    return say_deaths(rank_deaths(ranks))


def port_in_use(host: str, port: int) -> bool:
    """Something listens on host:port: the bind the server will do fails. SO_REUSEADDR, as the
    server sets it, so the closed connections of an earlier server do not count."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError:
        return False  # an address this machine cannot resolve: the server's own error says it
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def build_argv(cfg: Config, aux_ids: list[int]) -> list[str]:
    s, j = cfg.server, cfg.job
    python = s.python or sys.executable
    remote = ["--trust-remote-code"] if j.trust_remote_code else []
    if s.backend == "reference":
        return [
            python, "-m", "runner.serve.reference_server", "--model", j.model, "--host", s.host,
            "--port", str(s.port), "--device", s.device, "--dtype", s.dtype, "--threads", str(s.threads),
            "--aux-layer-ids", ",".join(map(str, aux_ids)), *remote, *s.extra_args,
        ]  # fmt: skip
    return server_argv(
        python=python, model=j.model, host=s.host, port=s.port, tp_size=s.tp_size, dp_size=s.dp_size,
        mem_fraction=s.mem_fraction, aux_layer_ids=aux_ids, extra_args=text_only(j.model, list(s.extra_args)),
        trust_remote_code=j.trust_remote_code,
    )  # fmt: skip


OVERRIDE_FLAG = "--json-model-override-args"


def text_only(model_dir: str, extra_args: list[str]) -> list[str]:
    """A multimodal wrapper (a config with ``text_config`` and ``vision_config``: Kimi-K2.5) is
    served text-only: SGLang's ``language_model_only`` override (its CLI flag is refused for
    Kimi) makes it build a plain tokenizer and no multimodal processor. Extraction sends token
    ids only, which never reach the vision tower, so the rows are the text model's either way,
    and a checkpoint's processor (remote code, image libraries) cannot stop the server. An
    operator's own override is kept; one that sets ``language_model_only`` wins."""
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return extra_args  # preflight reports an unreadable model
    if not (isinstance(cfg, dict) and "text_config" in cfg and "vision_config" in cfg):
        return extra_args
    out, overrides = [], {}
    it = iter(extra_args)
    for a in it:
        if a == OVERRIDE_FLAG or a.startswith(OVERRIDE_FLAG + "="):
            text = a.partition("=")[2] if "=" in a else next(it, "{}")
            try:
                overrides = json.loads(text)
            except ValueError:
                raise ArgsError(f"[server] extra_args: {OVERRIDE_FLAG} is not JSON: {text!r}") from None
            if not isinstance(overrides, dict):
                raise ArgsError(f"[server] extra_args: {OVERRIDE_FLAG} must be a JSON object")
            continue
        out.append(a)
    overrides.setdefault("language_model_only", True)
    return [*out, OVERRIDE_FLAG, json.dumps(overrides)]


def server_env(cfg: Config, dump_dir: str, aux_ids: list[int]) -> dict[str, str]:
    env = {**without_secrets(os.environ), **cfg.server.env}
    env[dump.DUMP_DIR_ENV] = dump_dir
    env[dump.DUMP_LAYERS_ENV] = ",".join(map(str, aux_ids))
    env[dump.DUMP_DTYPE_ENV] = cfg.job.dtype
    env[dump.DUMP_STORAGE_ENV] = cfg.job.storage
    env[dump.DUMP_MANTISSA_ENV] = str(cfg.job.mantissa_bits)
    # From a source checkout, a server on another interpreter (the SGLang venv) imports hsx's
    # own packages from it; an installed hsx lives in the server's environment already.
    root = checkout_root()
    if root:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


class Server:
    def __init__(self, cfg: Config, aux_ids: list[int], dump_dir: str, paths: RunPaths, argv=None, env=None):
        """The patched server that dumps; ``argv`` and ``env`` given: that server instead (the
        plain SGLang a measurement serves the draft with), with the same lifecycle."""
        self.cfg = cfg
        self.argv = argv or build_argv(cfg, aux_ids)
        self.url = f"http://{cfg.server.host}:{cfg.server.port}"
        self.env = env if env is not None else server_env(cfg, dump_dir, aux_ids)
        self.log_path, self.pid_file = paths.server_log, paths.server_pid
        j = cfg.job
        self.shm = ShmTracker(paths.server_shm, keep=(j.model, j.tokenizer, j.dataset, j.draft_config, j.out))
        self._start_pos = 0
        self._observed_at = 0.0
        self.ranks: dict[str, int] = {}  # "TP1" -> its scheduler's pid, from the log
        self.dead_ranks: list[tuple[str, int, str]] = []  # as seen first: (rank, pid, how)
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.started_at: float | None = None
        self.activity = ""
        self.bind_failed = ""  # what uvicorn said when its port was taken

    async def bring_up(self, recorder) -> None:
        """Start and wait until ready; a server that dies while starting is restarted like one
        that dies later (the same policy); one that never gets ready is not."""
        server = recorder.record.server
        while True:
            await self.start()
            server.pid, server.url, server.started_at = self.proc.pid, self.url, now_iso()
            try:
                await self.wait_ready(lambda: setattr(server, "activity", self.activity))
                server.activity = "ready"
                return
            except ServerExited as e:
                if not await self.restart_allowed(recorder, "server died during start-up"):
                    raise ServerError(
                        f"restart cap {self.cfg.server.max_restarts} spent; last start: {e}"
                    ) from None

    async def restart_allowed(self, recorder, why: str) -> bool:
        """The one restart policy, in start-up and mid-run alike: at most [server] max_restarts,
        each counted and recorded, backed off 1, 2, 4 … 30 times Timing.backoff_initial_s.
        False, and nothing counted, once the cap is spent."""
        cap = self.cfg.server.max_restarts
        if self.restarts >= cap:
            return False
        self.restarts += 1
        recorder.record.server.restarts = self.restarts
        recorder.error(f"{why}; restart {self.restarts}/{cap}")
        await asyncio.sleep(min(2 ** (self.restarts - 1), 30) * timing.current().backoff_initial_s)
        return True

    def kill_stale(self) -> int | None:
        """A server left by a runner that died (its process group) is killed before a new
        start, if the pid file proves it is that server (runner/serve/pidfile.py)."""
        return pidfile.kill_stale(self.pid_file)

    async def start(self) -> None:
        """On the event loop's thread, never a worker's: PR_SET_PDEATHSIG kills the child when
        the *thread* that created it ends."""
        pgid = self.kill_stale()
        self.shm.cleanup(pgid)  # what the last server left (this runner's, or a killed one's)
        await self._require_port()
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        log.write(f"\n=== hsx: starting server: {' '.join(self.argv)}\n".encode())
        log.flush()
        self._log_pos = self._start_pos = log.tell()
        self.ranks, self.dead_ranks, self.bind_failed = {}, [], ""
        self.shm.begin()
        self.proc = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        log.close()
        pidfile.write(self.pid_file, self.proc.pid)
        self.started_at = time.monotonic()
        self.activity = "launching"

    async def _require_port(self) -> None:
        """Another process on [server] port (a second job, a copied demo, a stray server) is
        named now, not found as a bind error in the log of each of max_restarts starts."""
        host, port = self.cfg.server.host, self.cfg.server.port
        deadline = time.monotonic() + PORT_FREE_S
        while port_in_use(host, port):
            if time.monotonic() >= deadline:
                raise ServerError(
                    f"[server] port {port} on {host} is in use by another process: "
                    "stop it, or set another [server] port"
                )
            await asyncio.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def observe(self) -> None:
        """While the server runs: its ranks' liveness, and its processes and shared memory
        (runner/serve/shm.py). SGLang's main process lingers ~5 s after a rank dies, so the dead
        rank is seen here first."""
        if not self.alive():
            return
        if self.ranks and not self.dead_ranks:
            self.dead_ranks = rank_deaths(self.ranks)
        if time.monotonic() - self._observed_at >= 1.0:  # a /proc scan: not every poll
            self._observed_at = time.monotonic()
            self.shm.observe(self.proc.pid)

    def death_reason(self) -> str:
        """Why the server last died: the rank seen dead first, else what its log says since it
        started ('' if neither says)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._start_pos)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            text = ""
        return say_deaths(self.dead_ranks, text) if self.dead_ranks else death_reason(text)

    def _scan_log(self) -> bool:
        """Read new log text; update activity; True once the ready line has appeared."""
        ready = False
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_pos)
                chunk = f.read()
        except OSError:
            return False
        if not chunk:
            return False
        # keep a partial last line for the next scan
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if cut < 0:
            return False
        self._log_pos += cut + 1
        text = chunk[: cut + 1].decode("utf-8", "replace")
        for m in ACTIVITY_RE.finditer(text):
            self.activity = m.group(1).strip()[:160]
        self.ranks.update((r, int(pid)) for r, pid in RANK_RE.findall(text))
        if READY_LINE in text:
            ready = True
        if m := BIND_RE.search(text):
            where = m.group(1).replace("'", "").replace(", ", ":")
            self.bind_failed = f"could not listen on {where}: {m.group(2)}"
        return ready

    def log_tail(self, n: int = 15) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 8192))
                lines = f.read().decode("utf-8", "replace").replace("\r", "\n").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    async def wait_ready(self, on_progress: Callable[[], None] | None = None) -> None:
        """Ready = ready line seen AND health answers 200; a dead process ends the wait at once."""
        timeout = self.cfg.server.start_timeout_s
        seen_line = False
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            while True:
                if self.proc is None or self.proc.poll() is not None:
                    code = None if self.proc is None else self.proc.returncode
                    raise ServerExited(
                        f"server exited with code {code} during start-up; log tail:\n{self.log_tail()}"
                    )
                seen_line = self._scan_log() or seen_line
                if self.bind_failed:  # it would wait out start_timeout_s; a restart may find the port free
                    await asyncio.to_thread(self.stop)
                    raise ServerExited(
                        f"server {self.bind_failed} ([server] port {self.cfg.server.port}: another "
                        f"process holds it); log tail:\n{self.log_tail()}"
                    )
                if seen_line:
                    try:
                        async with http.get(self.url + "/health") as r:
                            if r.status == 200:
                                self.activity = "ready"
                                return
                    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                        pass
                elapsed = time.monotonic() - (self.started_at or time.monotonic())
                if elapsed > timeout:
                    await asyncio.to_thread(self.stop)
                    raise ServerError(
                        f"server not ready after {timeout:g}s (last: {self.activity or 'nothing logged'})"
                    )
                if on_progress:
                    on_progress()
                self.observe()
                await asyncio.sleep(timing.current().server_poll_s)

    def stop(self, grace_s: float = 30.0) -> None:
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        try:  # the group may hold children that outlived the leader
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.shm.cleanup(p.pid)
        try:
            os.unlink(self.pid_file)
        except FileNotFoundError:
            pass
