"""SpecForge's own offline reader (``specforge.data.preprocessing``: ``list_local_files``,
``OfflineEagle3Dataset``), imported from its pinned release wheel or a source checkout, never
copied: the tests read our outputs with it (conftest's ``specforge`` fixture) and
``bench.storage`` times it. It lives with the tests, which import no bench code; the bench
imports it from here, as it does ``tests.sshd``.

The wheel is fetched by ``scripts/test.sh`` (``pip download --no-deps specforge==0.2.0``, like
SGLang's); its reader needs ``datasets``, ``transformers`` and ``tqdm`` (the ``dev`` extra)."""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import sys
import zipfile

VERSION = "0.2.0"
CACHE = "specforge"  # under the repository's .cache/


def wheel(cache: str) -> str | None:
    """The pinned wheel under ``cache`` (the repository's .cache/), if it was fetched."""
    found = sorted(glob.glob(os.path.join(cache, CACHE, f"specforge-{VERSION}-*.whl")))
    return found[-1] if found else None


def unpack(whl: str, dest: str) -> str:
    """The wheel's files under ``dest`` (a wheel is a zip of the installed tree); returns dest."""
    with zipfile.ZipFile(whl) as z:
        z.extractall(dest)
    return dest


def load_specforge(checkout: str):
    """specforge.data.preprocessing imported from the checkout ``checkout`` (never a copy).

    Only the ``specforge`` package is taken from there: the checkout's root is not put on
    sys.path, where its top-level ``datasets/`` folder would shadow the ``datasets`` library."""
    root = os.path.abspath(checkout)
    pkg = os.path.join(root, "specforge")
    src = os.path.join(pkg, "data", "preprocessing.py")
    if not os.path.isfile(src):
        raise ImportError(f"{root} is not a SpecForge checkout (no specforge/data/preprocessing.py)")
    have = sys.modules.get("specforge")
    if have is None:
        spec = importlib.util.spec_from_file_location(
            "specforge", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg]
        )
        have = importlib.util.module_from_spec(spec)
        sys.modules["specforge"] = have
        try:
            spec.loader.exec_module(have)
        except BaseException:
            del sys.modules["specforge"]
            raise
    if os.path.realpath(os.path.dirname(have.__file__)) != os.path.realpath(pkg):
        raise ImportError(f"specforge is already imported from {have.__file__}, not from {root}")
    mod = importlib.import_module("specforge.data.preprocessing")
    for name in ("list_local_files", "OfflineEagle3Dataset"):
        if not hasattr(mod, name):
            raise ImportError(f"{src} has no {name}")
    return mod
