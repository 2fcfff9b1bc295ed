"""Hidden-state write path against a raw sequential write of the same bytes on the same disk.

    .venv/bin/python -m bench.write_path [--dir D] [--seq 3000] [--hidden 7168] [--repeats 5]

Baseline: ``dd if=/dev/zero oflag=direct conv=fsync`` of the sample's byte count. Then, each
followed by an fsync so every row pays for durability: plain torch.save, torch.save with its
zip CRC off (diagnostic), safetensors save_file, and runner.contract.ckpt.write_sample. Methods run
interleaved, each repeat, and the median is reported. Files are removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

import torch
import xxhash

from runner.contract import ckpt

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_DD_LINE = re.compile(r"^(\d+) bytes.*copied, ([0-9.e+-]+) s", re.M)


def make_sample(seq: int, hidden: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)  # random bits: nothing for a compressing disk to gain
    return {
        "input_ids": torch.randint(0, 150_000, (seq,), generator=g),
        "loss_mask": torch.ones(seq, dtype=torch.int64),
        "hidden_state": torch.randn(1, seq, hidden, generator=g).to(dtype),
        "aux_hidden_state": torch.randn(1, seq, 3 * hidden, generator=g).to(dtype),
    }


def dd_rate(path: str, nbytes: int) -> float | None:
    """MB/s that dd reports for an O_DIRECT write + fsync of about nbytes; None if unsupported."""
    bs = min(4 << 20, -(-nbytes // 4096) * 4096)
    count = -(-nbytes // bs)
    cmd = ["dd", "if=/dev/zero", f"of={path}", f"bs={bs}", f"count={count}", "oflag=direct", "conv=fsync"]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    except FileNotFoundError:
        return None
    remove_if_exists(path)
    m = _DD_LINE.search(run.stderr)
    if run.returncode != 0 or not m or float(m.group(2)) <= 0:
        return None
    return int(m.group(1)) / float(m.group(2)) / 1e6


def remove_if_exists(path: str) -> None:
    if os.path.exists(path):
        os.unlink(path)


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _torch_save(sample, path):
    torch.save(sample, path)
    _fsync_path(path)


def _torch_save_no_crc(sample, path):
    with ckpt._zip_crc_off():
        torch.save(sample, path)
    _fsync_path(path)


def _safetensors(sample, path):
    from safetensors.torch import save_file

    save_file(sample, path)
    _fsync_path(path)


def _write_sample(sample, path):
    ckpt.write_sample(path, **sample)


def methods() -> dict:
    out = {
        "torch.save": _torch_save,
        "torch.save, zip CRC off": _torch_save_no_crc,
        "safetensors": _safetensors,
        "write_sample": _write_sample,
    }
    try:
        import safetensors.torch  # noqa: F401
    except ImportError:
        del out["safetensors"]
    return out


def timed_rate(fn, sample, path: str) -> float:
    t0 = time.perf_counter()
    fn(sample, path)
    dt = time.perf_counter() - t0
    size = os.path.getsize(path)
    remove_if_exists(path)
    return size / dt / 1e6


def hash_rate(sample) -> float:
    views = [t.contiguous().view(-1).view(torch.uint8).numpy() for t in sample.values()]
    nbytes = sum(v.nbytes for v in views)
    t0 = time.perf_counter()
    h = xxhash.xxh3_64()
    for v in views:
        h.update(v)
    h.hexdigest()
    return nbytes / (time.perf_counter() - t0) / 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.write_path", description=__doc__.split("\n")[0])
    p.add_argument("--dir", default=".", help="a folder on the disk to measure (default: .)")
    p.add_argument("--seq", type=int, default=3000)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    if a.seq < 1 or a.hidden < 1 or a.repeats < 1:
        p.error("--seq, --hidden and --repeats must be positive")

    sample = make_sample(a.seq, a.hidden, DTYPES[a.dtype])
    work = tempfile.mkdtemp(prefix=".hsx-bench-", dir=a.dir)
    try:
        path = os.path.join(work, "sample.ckpt")
        nbytes, _ = ckpt.write_sample(path, **sample)  # warm-up, and the byte count dd writes
        remove_if_exists(path)
        rates: dict[str, list[float]] = {"dd": []}
        table = methods()
        for name in table:
            rates[name] = []
        for _ in range(a.repeats):
            rate = dd_rate(path, nbytes)
            if rate is not None:
                rates["dd"].append(rate)
            for name, fn in table.items():
                rates[name].append(timed_rate(fn, sample, path))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in rates.items() if v}
    base = med.get("dd")
    label = f"seq {a.seq}, H {a.hidden}, {a.dtype}, {nbytes / 1e6:.1f} MB"
    print(f"disk: {os.path.abspath(a.dir)}   sample: {label}   median of {a.repeats}")
    print(f"{'method':34s} {'MB/s':>8s} {'÷ dd':>6s}")
    if base is None:
        print("dd oflag=direct conv=fsync: not available here (no dd, or no O_DIRECT on this filesystem)")
    for name, mbs in med.items():
        shown = "dd oflag=direct conv=fsync" if name == "dd" else f"{name} + fsync"
        ratio = f"{mbs / base:6.2f}" if base else "   n/a"
        print(f"{shown:34s} {mbs:8.0f} {ratio}")
    print(f"(xxh3_64 alone, in memory: {hash_rate(sample):,.0f} MB/s)")

    def r(name):
        return f"{med[name] / base:.2f}" if base and name in med else "n/a"

    dd_cell = f"{base:,.0f} MB/s" if base else "n/a"
    print(
        f"| {label} | dd {dd_cell} | torch.save {r('torch.save')} | safetensors {r('safetensors')} "
        f"| write_sample {r('write_sample')} |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
