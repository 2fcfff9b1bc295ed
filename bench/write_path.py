"""Hidden-state write path against a raw sequential write of the same bytes on the same disk.

    .venv/bin/python -m bench.write_path [--dir D] [--seq 3000] [--hidden 7168] [--repeats 5] [--threads 1]

Baseline: ``dd if=/dev/zero oflag=direct conv=fsync`` of the sample's byte count. Then, each
followed by an fsync so every row pays for durability: plain torch.save, torch.save with its
zip CRC off (diagnostic), safetensors save_file, runner.codec.ckpt.write_sample, and
write_sample as the [job] storage = "ckpt.gz" mode writes (``compress=True``: ISA-L gzip -1 on
the way), exact and with ``mantissa_bits=4`` (bf16 only). Methods run interleaved, each repeat,
and the median is reported. Files are removed afterwards.

The sample is bench.storage's synthetic heavy-tailed states (massive-activation channels), so
the ckpt.gz rows compress about as real states do; random normal bf16 would barely shrink.
Every row's MB/s is the sample's ``.ckpt`` byte count over the time to write it in that form
(so a compressed row is comparable with dd, which writes that many bytes); "per CPU s" is the
same bytes over this process's CPU time meanwhile (MB/s per core, which a busy machine does not
bend the way it bends wall time); "on disk" is the file it left.

``--threads``: torch's intra-op threads (default 1: one core per writer thread, as bench.storage
measures; more lets round_mantissa's many small ops fan out, which on a busy box costs far more
than it gains). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import torch
import xxhash

from bench.common import mb_s
from bench.storage import synthetic_sample
from runner.codec import ckpt
from runner.codec.sink import file_checksum, plain_checksum
from runner.contract.atomic import fsync_path

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_DD_LINE = re.compile(r"^(\d+) bytes.*copied, ([0-9.e+-]+) s", re.M)


def make_sample(seq: int, hidden: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """bench.storage's heavy-tailed synthetic states, in ``dtype`` (made as bf16: an fp32 copy's
    low mantissa bits are zero, so it compresses better than real fp32 states would)."""
    s = synthetic_sample(seq, hidden)
    return {
        **s,
        "hidden_state": s["hidden_state"].to(dtype),
        "aux_hidden_state": s["aux_hidden_state"].to(dtype),
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


def _torch_save(sample, path):
    torch.save(sample, path)
    fsync_path(path)


def _torch_save_no_crc(sample, path):
    with ckpt._zip_crc_off():
        torch.save(sample, path)
    fsync_path(path)


def _safetensors(sample, path):
    from safetensors.torch import save_file

    save_file(sample, path)
    fsync_path(path)


def _write_sample(sample, path):
    ckpt.write_sample(path, **sample)


def _write_gz(sample, path):
    ckpt.write_sample(path, **sample, compress=True)


def _write_gz_4bits(sample, path):
    ckpt.write_sample(path, **sample, compress=True, mantissa_bits=4)


GZ = "ckpt.gz"
GZ4 = "ckpt.gz, 4 mantissa bits"


def methods(bf16: bool = True) -> dict:
    out = {
        "torch.save": _torch_save,
        "torch.save, zip CRC off": _torch_save_no_crc,
        "safetensors": _safetensors,
        "write_sample": _write_sample,
        GZ: _write_gz,
        GZ4: _write_gz_4bits,
    }
    try:
        import safetensors.torch  # noqa: F401
    except ImportError:
        del out["safetensors"]
    if not bf16:  # mantissa_bits applies to bf16 files only
        del out[GZ4]
    return out


def timed_write(fn, sample, path: str) -> tuple[float, float, int]:
    """(seconds to write and fsync, CPU seconds of this process meanwhile, bytes on disk)."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn(sample, path)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    size = os.path.getsize(path)
    remove_if_exists(path)
    return dt, cpu, size


def check_gz(sample, path: str, raw_checksum: str) -> None:
    """The ckpt.gz row writes gzip of write_sample's very bytes (else its figures mean nothing)."""
    _write_gz(sample, path)
    try:
        if plain_checksum(path) != raw_checksum:
            raise RuntimeError(f"{GZ}: the file does not gunzip to write_sample's bytes")
    finally:
        remove_if_exists(path)


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
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    a = p.parse_args(argv)
    if min(a.seq, a.hidden, a.repeats, a.threads) < 1:
        p.error("--seq, --hidden, --repeats and --threads must be positive")

    sample = make_sample(a.seq, a.hidden, DTYPES[a.dtype])
    work = tempfile.mkdtemp(prefix=".hsx-bench-", dir=a.dir)
    table = methods(bf16=a.dtype == "bf16")
    secs: dict[str, list[float]] = {"dd": []}
    cpu: dict[str, list[float]] = {}
    disk: dict[str, int] = {}
    threads = torch.get_num_threads()  # the caller's, given back at the end
    torch.set_num_threads(a.threads)
    try:
        path = os.path.join(work, "sample.ckpt")
        nbytes, _ = ckpt.write_sample(path, **sample)  # warm-up, and the byte count dd writes
        raw_checksum = file_checksum(path)
        remove_if_exists(path)
        check_gz(sample, path, raw_checksum)
        for name, fn in table.items():  # every method's first call (imports, first-use costs)
            timed_write(fn, sample, path)
            secs[name], cpu[name] = [], []
        for _ in range(a.repeats):
            rate = dd_rate(path, nbytes)
            if rate is not None:
                secs["dd"].append(nbytes / rate / 1e6)
                disk["dd"] = nbytes
            for name, fn in table.items():
                dt, used, disk[name] = timed_write(fn, sample, path)
                secs[name].append(dt)
                cpu[name].append(used)
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(work, ignore_errors=True)

    med = {k: mb_s(nbytes, v) for k, v in secs.items() if v}
    per_cpu = {k: mb_s(nbytes, v) for k, v in cpu.items()}
    base = med.get("dd")
    label = f"seq {a.seq}, H {a.hidden}, {a.dtype}, {nbytes / 1e6:.1f} MB"
    print(f"disk: {os.path.abspath(a.dir)}   sample: {label}, synthetic heavy-tailed   median of {a.repeats}, "
          f"torch threads {a.threads}")  # fmt: skip
    print(
        f"{'method':40s} {'MB/s':>8s} {'÷ dd':>6s} {'per CPU s':>9s} {'on disk MB':>10s} {'smaller by':>10s}"
    )
    if base is None:
        print("dd oflag=direct conv=fsync: not available here (no dd, or no O_DIRECT on this filesystem)")
    for name, mbs in med.items():
        shown = "dd oflag=direct conv=fsync" if name == "dd" else f"{name} + fsync"
        ratio = f"{mbs / base:6.2f}" if base else "   n/a"
        on_cpu = "—" if per_cpu.get(name) is None else f"{per_cpu[name]:,.0f}"
        print(
            f"{shown:40s} {mbs:8.0f} {ratio} {on_cpu:>9s} {disk[name] / 1e6:10.1f} {nbytes / disk[name]:9.3f}×"
        )
    hashed = hash_rate(sample)
    print(f"(MB/s, per CPU s: the sample's {nbytes / 1e6:.1f} MB .ckpt bytes over each write's wall, CPU time; xxh3_64 alone, in memory: "
          f"{hashed:,.0f} MB/s)")  # fmt: skip
    report = {
        "bench": "write_path", "dir": os.path.abspath(a.dir), "seq": a.seq, "hidden": a.hidden,
        "dtype": a.dtype, "states": "synthetic", "sample_bytes": nbytes, "repeats": a.repeats,
        "threads": a.threads, "dd_mb_s": base, "xxh3_mb_s": hashed,
        "methods": {
            k: {"mb_s": v, "vs_dd": v / base if base else None, "mb_per_cpu_s": per_cpu[k], "bytes_on_disk": disk[k],
                "smaller_by": nbytes / disk[k]}
            for k, v in med.items() if k != "dd"
        },
    }  # fmt: skip
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
