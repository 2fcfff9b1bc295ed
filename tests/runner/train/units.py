"""What the training stage's unit tests share: a config, a model folder, a checkpoint, a stand-in
interpreter, an NVML stub (real files and processes throughout)."""

from __future__ import annotations

import json
import stat
import sys

from runner.contract.config import from_dict


def _ckpt(out, step, files):
    d = out / f"hsx-eagle3-step{step}"
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_bytes(b"x")
    return d


def _cfg(tmp_path, **train):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    body = {"job": {"model": str(tmp_path / "model"), "dataset": "d.jsonl", "out": str(out)}, "train": train}
    return from_dict(body, base_dir=str(tmp_path))


def _model(tmp_path, index=False):
    """A target dir as the demo's: config.json and one safetensors file (a real header)."""
    m = tmp_path / "model"
    m.mkdir(exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 265, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 128, "rms_norm_eps": 1e-5, "num_hidden_layers": 8}  # fmt: skip
    (m / "config.json").write_text(json.dumps(cfg))
    header = {n: {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}
              for n in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight")}  # fmt: skip
    raw = json.dumps(header).encode()
    (m / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 4)
    return m


UNIFIED = """import argparse
def main(argv=None):
    p = argparse.ArgumentParser(prog="specforge")
    p.add_subparsers(dest="command").add_parser("train")
    p.parse_args(argv)
"""


def _fake_python(tmp_path, name, version, cli):
    """An interpreter whose ``specforge`` is ``version`` with ``cli`` as its specforge/cli.py."""
    site = tmp_path / name
    (site / "specforge").mkdir(parents=True)
    (site / "specforge" / "__init__.py").write_text("")
    if cli is not None:
        (site / "specforge" / "cli.py").write_text(cli)
    dist = site / f"specforge-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: specforge\nVersion: {version}\n")
    py = tmp_path / f"{name}-python"
    py.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return str(py)


def _nvml(tmp_path, n):
    stub = tmp_path / f"nvml-{n}.json"
    stub.write_text(json.dumps({"gpus": [{"used_mib": 0, "procs": []}] * n}))
    return str(stub)
