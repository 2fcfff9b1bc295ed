"""``hsx deploy``: install the GPU-box side (hsx-ops[runner], the dump patch, the job's config)
over remote/, idempotently.

Layout on the box, under PREFIX (from ``[remote] runner = PREFIX/venv/bin/hsx-runner``):
``venv/`` its own virtual environment, ``wheels/`` the installed wheel, ``deploy.json`` what is
installed. The same record goes to the job's run directory. PREFIX must survive a reboot: paths
under /tmp, /var/tmp, /dev/shm, /run and tmpfs/ramfs mounts are refused.

Every step on the box is a fixed argv (never shell text) and is skipped when already done, so
running deploy twice changes nothing the second time. With ``[train] python`` set it ends with
``hsx-runner train setup`` (a check once the trainer's interpreter is there). Where systemd runs, a unit for the runner
is installed; enabled at boot only with ``autostart``. Elsewhere ``hsx-runner start`` runs the
job detached in its own session.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import posixpath
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field

from remote.errors import RemoteError
from runner.contract.config import Config, from_dict, require_job
from runner.contract.errors import ConfigError, HsxError

from .unit import UNIT_DIR, UNIT_NAME, render_unit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EPHEMERAL_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")
EPHEMERAL_FS = ("tmpfs", "ramfs")
RECORD = "deploy.json"
PIP_TIMEOUT_S = 3600.0  # a first install downloads torch (and sglang: ~11 GB)
STEP_TIMEOUT_S = 300.0
# Imported once after the install: a runner that cannot import these would fail at start.
RUNNER_IMPORTS = (
    "import runner.cli, runner.job.phases, patches.hooks, torch, transformers, aiohttp, orjson, xxhash"
)


@dataclass
class Options:
    wheel: str = ""  # a built hsx-ops wheel; default: build one from this source tree
    python: str = "python3"  # the interpreter on the box that creates the venv
    deps_from: str = ""  # an interpreter on the box whose packages the venv reuses (no download)
    autostart: bool = False  # enable the systemd unit at boot
    job_config: str = ""  # the config to install as [remote] runner_config; default: this one


@dataclass
class Package:
    path: str
    name: str
    version: str
    build: str  # digest of the wheel's RECORD: changes whenever any file in it changes
    patch: dict = field(default_factory=dict)


@dataclass
class Report:
    ok: bool = True
    prefix: str = ""
    changed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    record: dict = field(default_factory=dict)
    preflight: dict | None = None
    train: dict | None = None  # `hsx-runner train setup`'s reply, when the job's config sets [train] python
    warnings: list[str] = field(default_factory=list)

    def text(self) -> str:
        lines = [f"hsx deploy → {self.prefix}"]
        lines += [f"  changed: {c}" for c in self.changed] or ["  nothing changed: already deployed"]
        lines += [f"  warning: {w}" for w in self.warnings]
        pf = self.preflight or {}
        for c in pf.get("checks", []):
            lines.append(f"  preflight {'ok ' if c['ok'] else 'BAD'} {c['name']}: {c['detail']}")
        if self.train is not None:
            t = self.train
            said = f"specforge {t.get('version')} at {t.get('python')}" if t.get("ok") else t.get("reason")
            lines.append(f"  train setup {'ok ' if t.get('ok') else 'BAD'}: {said}")
        return "\n".join(lines)


class DeployError(HsxError):
    """Deploy cannot go on; the message says what to do."""


# --- local side: the wheel, the config ---------------------------------------------------------


def source_root() -> str | None:
    """The checkout this hsx runs from, when it runs from one."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(root, "pyproject.toml"), "rb") as f:
            return root if tomllib.load(f).get("project", {}).get("name") == "hsx-ops" else None
    except (OSError, tomllib.TOMLDecodeError):
        return None


def build_wheel(dest: str) -> str:
    """Build the hsx-ops wheel from this checkout into dest, from a copy so the tree stays clean."""
    root = source_root()
    if root is None:
        raise DeployError("hsx is not running from a source checkout: pass --wheel PATH (an hsx-ops wheel)")
    src = os.path.join(dest, "src")
    shutil.copytree(
        root, src, ignore=shutil.ignore_patterns(".*", "*.egg-info", "build", "dist", "__pycache__", "tests")
    )
    argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dest, src]
    try:
        import setuptools  # noqa: F401 - present: build with it, no download

        argv.insert(5, "--no-build-isolation")
    except ImportError:
        pass
    p = subprocess.run(argv, capture_output=True, text=True)
    wheels = [n for n in os.listdir(dest) if n.endswith(".whl")]
    if p.returncode != 0 or len(wheels) != 1:
        raise DeployError(f"building the hsx-ops wheel failed: {(p.stderr or p.stdout)[-800:]}")
    return os.path.join(dest, wheels[0])


def inspect_wheel(path: str) -> Package:
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            info = next(n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
            meta = z.read(info).decode()
            record = z.read(info.replace("METADATA", "RECORD"))
            patch = hashlib.sha256()
            for n in sorted(n for n in names if n.startswith("patches/") and n.endswith(".py")):
                patch.update(n.encode() + b"\0" + z.read(n))
    except (OSError, zipfile.BadZipFile, StopIteration, KeyError) as e:
        raise DeployError(f"{path} is not a readable wheel ({type(e).__name__}: {e})") from None
    head = dict(line.split(": ", 1) for line in meta.splitlines() if ": " in line and not line[0].isspace())
    if head.get("Name", "").replace("_", "-").lower() != "hsx-ops":
        raise DeployError(f"{path} is {head.get('Name')!r}, not an hsx-ops wheel")
    from patches.hooks import SGLANG_VERSION

    return Package(
        path=path,
        name=os.path.basename(path),
        version=head.get("Version", "?"),
        build=hashlib.sha256(record).hexdigest()[:16],
        patch={"sglang": SGLANG_VERSION, "digest": patch.hexdigest()[:16]},
    )


def prefix_of(cfg: Config) -> str:
    """PREFIX from ``[remote] runner = PREFIX/venv/bin/hsx-runner``; refused if it would not
    survive a reboot."""
    runner = posixpath.normpath(cfg.remote.runner)
    if not runner.startswith("/") or not runner.endswith("/venv/bin/hsx-runner"):
        raise ConfigError(
            f"[remote] runner must be PREFIX/venv/bin/hsx-runner with an absolute PREFIX for hsx deploy "
            f"(e.g. /data/hsx/venv/bin/hsx-runner), got {cfg.remote.runner!r}"
        )
    prefix = runner[: -len("/venv/bin/hsx-runner")] or "/"
    for path, what in ((prefix, "the install prefix"), (cfg.remote.runner_config, "[remote] runner_config")):
        if not path or not path.startswith("/"):
            raise ConfigError(f"{what} must be an absolute path on the GPU box, got {path!r}")
        if any(path == d or path.startswith(d + "/") for d in EPHEMERAL_DIRS):
            raise ConfigError(
                f"{what} {path} is wiped at reboot; put it on persistent storage (e.g. /data/hsx)"
            )
    return prefix


def runner_config(cfg: Config, opts: Options) -> tuple[bytes, Config]:
    """The bytes to install as runner_config, and the job as the box will read them."""
    path = opts.job_config or cfg.path
    try:
        with open(path, "rb") as f:
            data = f.read()
        parsed = tomllib.loads(data.decode())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read the job config {path}: {e}") from None
    rc = cfg.remote.runner_config
    job = from_dict(parsed, base_dir=posixpath.dirname(rc), source=rc)
    require_job(job)
    return data, job


# --- the box ------------------------------------------------------------------------------------


class Box:
    """Fixed argv and file writes on the GPU box, through the transport open_box built."""

    def __init__(self, transport):
        self.t = transport

    def run(self, *argv: str, timeout_s: float = STEP_TIMEOUT_S, ok=(0,)) -> str:
        res = self.t.run(list(argv), timeout_s)
        if res.code not in ok:
            raise DeployError(
                f"`{' '.join(argv)}` failed on the GPU box (exit {res.code}): {res.stderr[-800:]}"
            )
        return res.stdout

    def test(self, *argv: str) -> bool:
        return self.t.run(list(argv), STEP_TIMEOUT_S).code == 0

    def sha256(self, path: str) -> str | None:
        res = self.t.run(["sha256sum", path], STEP_TIMEOUT_S)
        return res.stdout.split()[0] if res.code == 0 and res.stdout else None

    def put(self, data: bytes, path: str, mode: int = 0o644) -> bool:
        """Write path unless it already holds data; True when written."""
        if self.sha256(path) == hashlib.sha256(data).hexdigest():
            return False
        upload = getattr(self.t, "upload", None)
        if upload is not None:
            upload(data, path, mode)
        else:  # LocalTransport: the box is this machine
            tmp = f"{path}.hsx-part"
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        return True

    def read_json(self, path: str) -> dict:
        res = self.t.run(["cat", path], STEP_TIMEOUT_S)
        try:
            d = json.loads(res.stdout) if res.code == 0 else {}
        except json.JSONDecodeError:
            d = {}
        return d if isinstance(d, dict) else {}


def deploy(cfg: Config, opts: Options, transport) -> Report:
    prefix = prefix_of(cfg)
    conf_bytes, job = runner_config(cfg, opts)
    unit = render_unit(prefix, cfg.remote.runner_config, job.job.out)  # refused before the box is touched
    with tempfile.TemporaryDirectory(prefix="hsx-wheel-") as tmp:
        pkg = inspect_wheel(opts.wheel or build_wheel(tmp))
        with open(pkg.path, "rb") as f:
            wheel_bytes = f.read()
    box, rep = Box(transport), Report(prefix=prefix)
    venv, rc = f"{prefix}/venv", cfg.remote.runner_config
    vpy = f"{venv}/bin/python"

    box.run("mkdir", "-p", f"{prefix}/wheels", posixpath.dirname(rc), job.job.out)
    fs = box.run("stat", "-f", "-c", "%T", prefix).strip()
    if fs in EPHEMERAL_FS:
        raise DeployError(f"{prefix} is on {fs}, wiped at reboot; put the prefix on persistent storage")

    have = box.read_json(f"{prefix}/{RECORD}")
    fresh = not box.test("test", "-x", vpy)
    same = not fresh and have.get("build") == pkg.build and box.test("test", "-x", f"{venv}/bin/hsx-runner")
    if not same and not fresh and _runner_alive(box, f"{venv}/bin/hsx-runner", rc):
        raise DeployError(
            "the runner is running: stop it first (/extract stop), then deploy; resume continues"
        )

    if fresh:
        box.run(opts.deps_from or opts.python, "-m", "venv", venv)
        rep.changed.append(f"virtual environment created at {venv}")
    if opts.deps_from and _link_deps(box, opts.deps_from, vpy):
        rep.changed.append(f"venv reuses the packages of {opts.deps_from}")
    if not same:  # (a rebuilt wheel differs in zip timestamps only: compare builds, not bytes)
        wheel_path = f"{prefix}/wheels/{pkg.name}"
        box.put(wheel_bytes, wheel_path)
        _pip_install(box, vpy, wheel_path, job, opts)
        rep.changed.append(f"installed hsx-ops {pkg.version} (build {pkg.build})")
        box.run(vpy, "-c", RUNNER_IMPORTS, timeout_s=STEP_TIMEOUT_S)
    else:
        rep.kept.append(f"hsx-ops {pkg.version} (build {pkg.build})")
    if box.put(conf_bytes, rc, 0o640):
        rep.changed.append(f"job config installed: {rc}")

    supervisor = "systemd" if box.test("test", "-d", "/run/systemd/system") else "session"
    if supervisor == "systemd":
        rep.changed += _install_unit(box, unit, opts.autostart)
    elif opts.autostart:
        rep.warnings.append("autostart needs systemd, which does not run on the GPU box: not set up")

    record = {
        "package": "hsx-ops",
        "version": pkg.version,
        "build": pkg.build,
        "patch": pkg.patch,
        "prefix": prefix,
        "venv": venv,
        "runner_config": rc,
        "deps": f"reused from {opts.deps_from}" if opts.deps_from else "installed from the package index",
        "supervisor": supervisor,
        "autostart": bool(opts.autostart and supervisor == "systemd"),
    }
    unchanged = all(have.get(k) == v for k, v in record.items())
    record["deployed_at"] = have["deployed_at"] if unchanged and "deployed_at" in have else _now()
    text = (json.dumps(record, indent=1) + "\n").encode()
    for path in (f"{prefix}/{RECORD}", posixpath.join(job.job.out, RECORD)):
        if box.put(text, path):
            rep.changed.append(f"recorded in {path}")
    rep.record = record

    res = transport.run([f"{venv}/bin/hsx-runner", "preflight", "--json", "--config", rc], STEP_TIMEOUT_S)
    try:
        rep.preflight = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise DeployError(
            f"hsx-runner preflight failed on the box (exit {res.code}): {res.stderr[-800:]}"
        ) from None
    rep.ok = bool(rep.preflight.get("ok"))
    if job.train.python:  # [train] set: its interpreter checked (a lane's venv built: "auto") on the box
        rep.train = _train_setup(transport, f"{venv}/bin/hsx-runner", rc)
        rep.ok = rep.ok and bool(rep.train.get("ok"))
    elif "train" in tomllib.loads(conf_bytes.decode()):
        rep.warnings.append(
            '[train] names no python: set python = "auto" (deploy then builds SpecForge\'s venv on the box) '
            "or an interpreter with specforge 0.2.0 (train setup checks it)"
        )
    return rep


def _train_setup(transport, runner: str, rc: str) -> dict:
    """``hsx-runner train setup`` on the box: idempotent (a check once the interpreter is there)."""
    res = transport.run([runner, "train", "setup", "--json", "--config", rc], PIP_TIMEOUT_S)
    try:
        got = json.loads(res.stdout)
    except json.JSONDecodeError:
        got = None
    if not isinstance(got, dict):
        return {
            "ok": False,
            "reason": f"hsx-runner train setup failed on the box (exit {res.code}): {res.stderr[-800:]}",
        }
    return got


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _runner_alive(box: Box, runner: str, rc: str) -> bool:
    res = box.t.run([runner, "status", "--json", "--config", rc], STEP_TIMEOUT_S)
    try:
        return res.code == 0 and bool(json.loads(res.stdout).get("alive"))
    except (json.JSONDecodeError, AttributeError):
        return False


def _link_deps(box: Box, deps_python: str, vpy: str) -> bool:
    """Point the venv at another interpreter's site-packages with a .pth file (same Python)."""
    probe = "import json, site, sys; print(json.dumps([sys.version_info[:2], site.getsitepackages()]))"
    (theirs, dirs), (ours, _) = (json.loads(box.run(py, "-c", probe)) for py in (deps_python, vpy))
    if theirs != ours:
        raise DeployError(f"{deps_python} is Python {theirs}, the venv is {ours}: they must match")
    purelib = box.run(vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    return box.put(("\n".join(dirs) + "\n").encode(), f"{purelib}/hsx-deps.pth")


def _pip_install(box: Box, vpy: str, wheel: str, job: Config, opts: Options) -> None:
    pip = [vpy, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input"]
    if not opts.deps_from:
        extras = "runner,sglang" if job.server.backend == "sglang" else "runner"
        box.run(*pip, f"{wheel}[{extras}]", timeout_s=PIP_TIMEOUT_S)
    # This exact build, even when the version number did not change.
    box.run(*pip, "--no-deps", "--force-reinstall", wheel, timeout_s=PIP_TIMEOUT_S)


def _install_unit(box: Box, unit: str, autostart: bool) -> list[str]:
    changed = []
    path = f"{UNIT_DIR}/{UNIT_NAME}"
    if box.put(unit.encode(), path):
        box.run("systemctl", "daemon-reload")
        changed.append(f"systemd unit installed: {path}")
    enabled = box.test("systemctl", "is-enabled", "--quiet", UNIT_NAME)
    if autostart != enabled:
        box.run("systemctl", "enable" if autostart else "disable", "--quiet", UNIT_NAME)
        changed.append(f"{UNIT_NAME} {'enabled' if autostart else 'disabled'} at boot")
    return changed


def main(cfg: Config, opts: Options, as_json: bool) -> int:
    """`hsx deploy`: 0 deployed and preflight ok, 1 deployed but preflight found a problem,
    2 could not deploy."""
    from remote.connect import open_box

    box = open_box(cfg)
    try:
        rep = deploy(cfg, opts, box.transport)
    except (DeployError, ConfigError, RemoteError) as e:
        print(json.dumps({"ok": False, "error": str(e)}) if as_json else f"hsx deploy: {e}")
        return 2
    finally:
        box.close()
    print(json.dumps(asdict(rep)) if as_json else rep.text())
    return 0 if rep.ok else 1
