"""Verify's read rate against `cat` of the same files on the same disk.

    .venv/bin/python -m bench.verify [--dir D] [--files 100] [--seq 2048] [--hidden 1024] [--repeats 3]

Writes an output of ``--files`` samples (SpecForge layout, manifest, dataset.json, pre-tokenized
rows) with runner.codec.ckpt.write_sample, then times, interleaved and each ``--repeats`` times (the
median is reported): ``cat`` of every file to /dev/null (the baseline: reading the bytes and
nothing else), ``verify --quick`` (sizes, loads, shapes, tokens) and ``verify`` (checksums and
finite values too). Caches are dropped before each timing when the machine allows it (root),
else every method reads warm files and the report says so. Files are removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

import torch

from bench.common import mb_s
from runner.codec import ckpt
from runner.contract.config import from_dict
from runner.output.store import Store, sample_path, shard_name
from runner.output.verify import verify


def build(root: str, files: int, seq: int, hidden: int) -> None:
    out, model = os.path.join(root, "out"), os.path.join(root, "model")
    os.makedirs(model)
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump({"hidden_size": hidden, "num_hidden_layers": 8, "vocab_size": 150_000}, f)
    g = torch.Generator().manual_seed(0)
    rows, store = [], Store(out)
    for idx in range(files):
        ids = torch.randint(0, 150_000, (seq,), generator=g)
        rows.append(json.dumps({"input_ids": ids.tolist()}) + "\n")
        path = sample_path(out, idx)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        nbytes, checksum = ckpt.write_sample(
            path, input_ids=ids, loss_mask=torch.ones(seq, dtype=torch.int64),
            hidden_state=torch.randn(1, seq, hidden, generator=g).to(torch.bfloat16),
            aux_hidden_state=torch.randn(1, seq, 3 * hidden, generator=g).to(torch.bfloat16),
        )  # fmt: skip
        store.append_manifest(idx, seq, nbytes, checksum, shard_name(idx))
    with open(os.path.join(root, "data.jsonl"), "w") as f:
        f.writelines(rows)
    with open(os.path.join(out, "dataset.json"), "w") as f:
        json.dump({"hidden_size": hidden, "dtype": "bfloat16", "total": files}, f)


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default=None)
    p.add_argument("--files", type=int, default=100)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="hsx-bench-verify-", dir=a.dir)
    try:
        build(root, a.files, a.seq, a.hidden)
        cfg = from_dict({"job": {"model": os.path.join(root, "model"), "dataset": os.path.join(root, "data.jsonl"),
                                 "out": os.path.join(root, "out"), "max_length": a.seq + 1}}, base_dir=root)  # fmt: skip
        paths = [sample_path(cfg.job.out, i) for i in range(a.files)]
        total = sum(os.path.getsize(x) for x in paths)
        methods = {
            "cat": lambda: subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True),
            "verify --quick": lambda: verify(cfg, quick=True),
            "verify": lambda: verify(cfg),
        }
        times: dict[str, list[float]] = {k: [] for k in methods}
        cold = True
        for _ in range(a.repeats):
            for name, fn in methods.items():
                cold = drop_caches() and cold
                t0 = time.perf_counter()
                rep = fn()
                times[name].append(time.perf_counter() - t0)
                if isinstance(rep, dict):
                    assert rep["ok"] == a.files, rep
        rate = {k: mb_s(total, v) for k, v in times.items()}
        print(f"{a.files} files x {total / a.files / 1e6:.1f} MB = {total / 1e9:.2f} GB, "
              f"{'cold' if cold else 'warm'} cache, median of {a.repeats}")  # fmt: skip
        for k, r in rate.items():
            print(f"  {k:15s} {r:8.0f} MB/s   ratio to cat {r / rate['cat']:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
