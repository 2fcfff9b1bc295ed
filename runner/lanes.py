"""A CPU lane's own venv (the real SGLang's, SpecForge's trainer's), apart from hsx's: built
once, in named steps, under a folder keyed on its pin and lock files' hash, so a changed pin builds
anew and an unchanged one is reused; the marker file is written last, so a half-built venv is never
taken for a built one. Stdlib and the contract only: a leaf every stage may use."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from .contract.atomic import read_object, write_atomic
from .procs import alive


def to_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class BuildError(RuntimeError):
    """A build step failed: the venv is left without its marker, so the next build starts anew."""


def default_root() -> str:
    """Where a lane is built when nothing names a place: a source checkout's ``.cache``, else
    ``~/.cache/hsx``."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.exists(os.path.join(here, "pyproject.toml")):
        return os.path.join(here, ".cache")
    return os.path.expanduser("~/.cache/hsx")


@dataclass(frozen=True)
class Lane:
    name: str  # the folder's prefix and the name said while building: "sglang-cpu"
    title: str  # "SGLang CPU venv"
    marker: str  # written last, inside the venv
    extra_key: str = ""  # more than the pins that makes a venv differ (a shim's source)

    def _file(self, ext: str):
        return resources.files("runner").joinpath(f"assets/{self.name}.{ext}")

    def _asset(self, ext: str) -> str:
        f = self._file(ext)
        return f.read_text() if f.is_file() else ""

    def pins(self) -> str:
        """The pin file (``assets/NAME.txt``) and the lock (``assets/NAME.lock``), as one text."""
        return self._asset("txt") + self._asset("lock")

    def locked_count(self) -> int:
        """How many packages the lock names."""
        return sum(1 for ln in self._asset("lock").splitlines() if ln[:1].isalnum())

    def locked(self, py: str, *flags: str) -> list[str]:
        """pip's argv installing the lock: each file checked against its sha256, wheels only, so
        a build runs no package's setup code and takes nothing the lock does not name."""
        flags = ("--require-hashes", "--only-binary", ":all:", *flags)
        return [py, "-m", "pip", "install", *flags, "-r", str(self._file("lock"))]

    def pinned(self, tag: str) -> list[str]:
        """The requirements on the pin file's ``#@TAG`` line."""
        for line in self._asset("txt").splitlines():
            if line.startswith(f"#@{tag} "):
                return line.split()[1:]
        raise ValueError(f"{self.name}.txt has no #@{tag} line")

    def requirements(self) -> list[str]:
        """The pin file's plain lines (comments and #@ lines left out)."""
        return [ln for ln in self._asset("txt").splitlines() if ln.strip() and not ln.startswith("#")]

    def venv_dir(self, root: str) -> str:
        key = hashlib.sha256((self.pins() + self.extra_key).encode()).hexdigest()[:12]
        return os.path.join(os.path.abspath(root), f"{self.name}-{key}")

    def python_of(self, root: str) -> str | None:
        """The lane's interpreter if its venv is built, else None."""
        d = self.venv_dir(root)
        py = os.path.join(d, "bin", "python")
        return py if os.path.exists(os.path.join(d, self.marker)) and os.path.exists(py) else None

    def root_of(self, python: str) -> str | None:
        """The root whose venv of this lane ``python`` is (built or not), else None."""
        if not python:
            return None
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(python))))
        return root if os.path.join(self.venv_dir(root), "bin", "python") == os.path.abspath(python) else None

    def build(
        self,
        root: str,
        steps: Callable[[str], list[tuple[str, list[str]]]],
        finish: Callable[[str], None] = lambda d: None,
        say: Callable[[str], None] = to_stderr,
    ) -> str:
        """Build the venv unless built; return its python. ``steps(python)``: (what, argv) after
        the venv is created; ``finish(venv)`` runs before the marker is written."""
        done = self.python_of(root)
        if done:
            return done
        d = self.venv_dir(root)
        py = os.path.join(d, "bin", "python")
        todo = [("creating the venv", [sys.executable, "-m", "venv", "--clear", d]), *steps(py)]
        index = pip_index()
        say(f"{self.title} {d}: building from {index}")
        try:
            for i, (what, argv) in enumerate(todo, 1):
                step = f"step {i}/{len(todo)}: {what}"
                say(f"{self.title} {d}: {step}")
                _progress(d, {"pid": os.getpid(), "text": f"{self.title}, {step} (from {index})"})
                code = _step(argv)
                if code != 0:
                    raise BuildError(f"{self.title} {d}: step {i}/{len(todo)} ({what}) failed (exit {code}); "
                                     "what it said is on stderr; the next setup starts it anew")  # fmt: skip
            finish(d)
            with open(os.path.join(d, self.marker), "w") as f:
                f.write(self.pins())
        finally:
            with contextlib.suppress(OSError):
                os.unlink(d + BUILDING)
        return py


def _step(argv: list[str]) -> int:
    """One build step's exit code. stdout is hsx-runner's JSON answer: what pip says goes beside
    it, to stderr; to the process's own (fd 2) where ``sys.stderr`` is no file, as while a caller
    in this process captures its own words (a status read beside a build in another thread)."""
    try:
        err = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        err = 2
    return subprocess.run(argv, stdout=err, stdin=subprocess.DEVNULL).returncode


BUILDING = ".building"  # beside a venv while it is built: its step, for a status read meanwhile


def _progress(venv: str, d: dict) -> None:
    """Said for a status read; a build never fails for want of it."""
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(venv), exist_ok=True)
        write_atomic(venv + BUILDING, json.dumps(d), 0o644)


def building(venv: str) -> str | None:
    """What the build of ``venv`` is doing now (None: no build is under way)."""
    d = read_object(venv + BUILDING) or {}
    text = d.get("text")
    return str(text)[:300] if text is not None and alive(d.get("pid")) else None


_SOURCES = ("no-index", "index-url", "extra-index-url", "find-links")


def pip_index() -> str:
    """Where pip installs from here, as pip itself resolves it (its environment variables first,
    then its config files): the index, and any extra index or find-links folder beside it."""
    try:
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=30
        ).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        listed = []
    got: dict[str, str] = {}
    for line in sorted(listed, key=lambda ln: not ln.startswith(":env:")):  # the environment wins
        key, _, value = line.partition("=")
        name = key.rpartition(".")[2]
        if name in _SOURCES and name not in got:
            got[name] = value.strip().strip("'\"")
    if got.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        said = ["no index (no-index)"]
    else:
        said = [got.get("index-url") or "pip's default index (https://pypi.org/simple)"]
    said += [f"{name} {got[name]}" for name in ("extra-index-url", "find-links") if got.get(name)]
    return " + ".join(said)
