"""The patch check of a start's preflight runs in the server's interpreter once per SGLang install
and is answered from what it found until that install changes: real interpreters on a stand-in
`sglang` package that counts its imports (the check imports it; finding it must not)."""

from __future__ import annotations

import os
import sys

import pytest

from runner.contract.config import load
from runner.job import patch_check
from tests.conftest import write_config


@pytest.fixture
def fake(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "sglang" / "srt").mkdir(parents=True)
    imports = tmp_path / "imports"
    (site / "sglang" / "__init__.py").write_text(
        f"open({str(imports)!r}, 'a').write('x')\n__version__ = '0.0.1'\n"
    )
    (site / "sglang" / "srt" / "server_args.py").write_text("X = 1\n")
    monkeypatch.setattr(patch_check, "cache_path", lambda: str(tmp_path / "cache" / "checks.json"))
    conf = write_config(
        tmp_path / "hsx.toml",
        job={"model": "m", "dataset": "d.jsonl", "out": str(tmp_path / "out")},
        server={"backend": "sglang", "python": sys.executable, "env": {"PYTHONPATH": str(site)}},
    )
    return load(conf), site, imports


def _imports(path) -> int:
    return len(path.read_text()) if path.exists() else 0


def test_the_same_install_is_checked_once_and_again_once_it_changes(fake, tmp_path):
    cfg, site, imports = fake
    wrong = ["SGLang version is '0.0.1'; this patch is written for 0.5.23 only"]
    assert patch_check.problems(cfg) == wrong and _imports(imports) == 1
    assert patch_check.problems(cfg) == wrong and _imports(imports) == 1  # answered from the last check
    (site / "sglang" / "srt" / "server_args.py").write_text("X = 2  # an upgrade in place\n")
    assert patch_check.problems(cfg) == wrong and _imports(imports) == 2
    assert patch_check.problems(cfg) == wrong and _imports(imports) == 2
    (site / "sglang" / "srt" / "new_module.py").write_text("")  # a file added
    assert patch_check.problems(cfg) == wrong and _imports(imports) == 3


def test_an_unreadable_cache_is_checked_again_and_written_anew(fake):
    cfg, _, imports = fake
    os.makedirs(os.path.dirname(patch_check.cache_path()))
    with open(patch_check.cache_path(), "w") as f:
        f.write("{not json")
    assert patch_check.problems(cfg) and _imports(imports) == 1
    assert patch_check.problems(cfg) and _imports(imports) == 1


def test_an_interpreter_without_sglang_is_said_and_not_kept(fake, tmp_path):
    cfg, site, imports = fake
    cfg.server.env["PYTHONPATH"] = str(tmp_path / "nowhere")
    said = patch_check.problems(cfg)
    assert said and "sglang is not importable here" in said[0]
    assert not os.path.exists(patch_check.cache_path())
    cfg.server.python = str(tmp_path / "no-python")
    assert patch_check.problems(cfg)[0].startswith("cannot run")
