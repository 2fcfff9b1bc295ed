"""Do the dump patch's hook points hold in the SGLang a server will run? Checked in that
interpreter (the SGLang venv is often not the runner's), which imports SGLang: ~12 s of CPU on
this box kind, paid by every start and resume before it answers. The answer is kept per install
(the interpreter, its PYTHONPATH, every SGLang source file's size and mtime, hsx's own hook
table), so the same SGLang is checked once and any change to it is checked again."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from ..contract.atomic import write_atomic
from ..contract.config import Config

CHECK = (
    "import json\n"
    "from patches.hooks import IncompatibleSGLang\n"
    "from patches.hooks_installed import check_installed\n"
    "try:\n    print(json.dumps(check_installed()))\n"
    "except IncompatibleSGLang as e:\n    print(json.dumps([str(e)]))\n"
)
# where SGLang's sources are, without importing it (find_spec runs no package code)
FIND = (
    "import importlib.util as u, json\n"
    "s = u.find_spec('sglang')\n"
    "print(json.dumps(list(s.submodule_search_locations or []) if s else []))\n"
)
KEPT = 8  # installs remembered
_HOOK_SOURCES = ("hooks.py", "hooks_installed.py", "hooks_source.py")


def cache_path() -> str:
    from ..lanes import default_root

    return os.path.join(default_root(), "sglang-patch-checks.json")


def problems(cfg: Config) -> list[str]:
    """The patch's problems in the server's interpreter; [] when its hook points hold."""
    from ..serve.server import server_env

    python = cfg.server.python or sys.executable
    env = server_env(cfg, "", [])
    key = install_key(python, env)
    known = _read() if key else {}
    if key in known:
        return known[key]
    try:
        p = subprocess.run([python, "-c", CHECK], capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"cannot run {python}: {e}"]
    try:
        found = [str(x) for x in json.loads(p.stdout.strip().splitlines()[-1])]
    except (IndexError, ValueError):
        return [f"{python} could not check the patch: {(p.stderr or p.stdout).strip()[-300:]}"]
    if key:
        _keep(known, key, found)
    return found


def install_key(python: str, env: dict[str, str]) -> str | None:
    """What the check's answer depends on, hashed; None when SGLang's sources cannot be found
    (the check then runs, and says why)."""
    try:
        p = subprocess.run([python, "-c", FIND], capture_output=True, text=True, timeout=60, env=env)
        roots = json.loads(p.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, IndexError, ValueError):
        return None
    if not roots:
        return None
    h = hashlib.sha256()
    h.update(f"{os.path.realpath(python)}\0{env.get('PYTHONPATH', '')}\0".encode())
    here = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "patches"
    )
    for name in _HOOK_SOURCES:
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    for root in sorted(roots):
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    st = os.stat(path)
                    h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _read() -> dict[str, list[str]]:
    try:
        with open(cache_path(), encoding="utf-8") as f:
            got = json.load(f)
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: checked again and written anew
    if not isinstance(got, dict):
        return {}
    return {k: v for k, v in got.items() if isinstance(v, list) and all(isinstance(x, str) for x in v)}


def _keep(known: dict[str, list[str]], key: str, found: list[str]) -> None:
    kept = {k: v for k, v in known.items() if k != key}
    kept = dict(list(kept.items())[-(KEPT - 1) :])
    kept[key] = found
    try:
        os.makedirs(os.path.dirname(cache_path()), exist_ok=True)
        write_atomic(cache_path(), json.dumps(kept, indent=1))
    except OSError:
        pass  # not kept: the next start checks again
