"""The trainer venvs' locks: every package pinned with its files' hashes, installed by pip in
hash-checking mode, wheels only; and the build names where pip takes packages from."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile

import pytest

from runner import lanes, specforge_cpu, specforge_gpu

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\\]+)")
HASH = re.compile(r"^ {4}--hash=sha256:[0-9a-f]{64}(?: \\)?$")


def _locked(lane: lanes.Lane) -> dict[str, list[str]]:
    """The lock's packages, each with its hash lines; fails on a line that is neither."""
    got: dict[str, list[str]] = {}
    name = None
    for line in lane._asset("lock").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if m := PIN.match(line):
            name = f"{m[1].lower()}=={m[2]}"
            assert name not in got or ";" in line, line  # twice only under other markers
            got.setdefault(name, [])
        else:
            assert name and HASH.match(line), line
            got[name].append(line)
    return got


@pytest.mark.parametrize("lane", [specforge_gpu.LANE, specforge_cpu.LANE], ids=["gpu", "cpu"])
def test_every_package_of_a_trainer_lock_is_pinned_with_its_files_hashes(lane):
    got = _locked(lane)
    assert "specforge==0.2.0" in got and all(got.values()), [n for n, h in got.items() if not h]
    assert lane.locked_count() == sum(1 for ln in lane._asset("lock").splitlines() if PIN.match(ln))


def test_the_gpu_lock_is_specforges_own_pins_and_the_cpu_lock_keeps_cuda_out():
    gpu, cpu = _locked(specforge_gpu.LANE), _locked(specforge_cpu.LANE)
    assert {"torch==2.11.0", "transformers==5.8.1", "sglang==0.5.14"} <= set(gpu)
    assert not [n for n in cpu if n.startswith(("torch==", "nvidia-", "sglang=="))], (
        cpu
    )  # the CPU torch is the box's


def test_a_lane_key_follows_its_lock(tmp_path, monkeypatch):
    """A moved pin in the lock builds a new venv: the folder's key covers the lock."""
    before = specforge_gpu.venv_dir(str(tmp_path))
    text = specforge_gpu.LANE._asset("lock")
    monkeypatch.setattr(
        lanes.Lane, "_asset", lambda self, ext: text.replace("==0.2.0", "==0.2.1") if ext == "lock" else ""
    )
    assert specforge_gpu.venv_dir(str(tmp_path)) != before


def _wheel(folder, name: str, version: str) -> str:
    """A minimal wheel built by hand (no build backend, no index): one module."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": b"VALUE = 1\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hsx-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}"
        for p, b in files.items()
    ]
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    path = os.path.join(folder, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for p, b in files.items():
            z.writestr(p, b)
    return path


def test_the_locked_install_refuses_a_file_whose_hash_is_not_the_locks(tmp_path):
    """The argv a lane installs its lock with, run by pip against a wheel on disk: a file whose
    sha256 is not the lock's is refused and nothing is installed; the lock's own is taken."""
    links = tmp_path / "links"
    links.mkdir()
    wheel = _wheel(str(links), "hsxlocked", "1.0")
    good = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links), "PIP_CONSTRAINT": ""}
    for digest, ok in (("0" * 64, False), (good, True)):
        lock = tmp_path / f"{ok}.lock"
        lock.write_text(f"hsxlocked==1.0 \\\n    --hash=sha256:{digest}\n")
        target = tmp_path / f"site-{ok}"
        argv = specforge_cpu.LANE.locked(sys.executable, "--no-deps", "--target", str(target))
        assert (
            argv[-2] == "-r"
            and "--require-hashes" in argv
            and argv[argv.index("--only-binary") + 1] == ":all:"
        )
        p = subprocess.run([*argv[:-1], str(lock)], capture_output=True, text=True, env=env, timeout=120)
        assert (p.returncode == 0) is ok, p.stderr
        assert (target / "hsxlocked.py").exists() is ok
        if not ok:
            assert "DO NOT MATCH THE HASHES" in p.stderr, p.stderr


def test_the_build_names_each_place_pip_takes_packages_from(monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://extra.example/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "/srv/wheels")
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    said = lanes.pip_index()
    assert said.startswith("https://mirror.example/simple"), said
    assert "extra-index-url https://extra.example/simple" in said and "find-links /srv/wheels" in said
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert lanes.pip_index().startswith("no index (no-index)")


def test_a_build_step_speaks_to_stderr_even_while_this_process_captures_its_own(monkeypatch, capfd):
    """A status read in this process swaps sys.stderr for a buffer while a build runs in another
    thread (found by the suite: the build died of `fileno`); the step's words go to fd 2."""
    import io

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert lanes._step([sys.executable, "-c", "print('pip says')"]) == 0
    assert lanes._step([sys.executable, "-c", "raise SystemExit(3)"]) == 3
    out = capfd.readouterr()
    assert "pip says" in out.err and "pip says" not in out.out and sys.stderr.getvalue() == ""


def test_a_build_is_said_only_while_its_builder_runs(tmp_path):
    """A status read names the build's step while the builder lives; a builder that died (a
    zombie too: it ended, nobody reaped it) or a broken marker says no build is under way."""
    venv = str(tmp_path / "venv")
    lanes._progress(venv, {"pid": os.getpid(), "text": "SpecForge's venv, installing (from an index)"})
    assert lanes.building(venv) == "SpecForge's venv, installing (from an index)"

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # it has ended, and is not reaped: a zombie
    lanes._progress(venv, {"pid": child.pid, "text": "half-built"})
    assert lanes.building(venv) is None
    child.wait()

    for broken in ({"pid": "12"}, {"pid": True, "text": "x"}, {"text": "no pid"}, {"pid": os.getpid()}):
        lanes._progress(venv, broken)
        assert lanes.building(venv) is None, broken
    os.unlink(venv + lanes.BUILDING)
    assert lanes.building(venv) is None
