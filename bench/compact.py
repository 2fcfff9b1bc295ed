"""``hsx-runner compact``'s rate against ``cat`` of the same files on the same disk.

    .venv/bin/python -m bench.compact [--dir D] [--samples 8] [--seq 2048] [--hidden 7168] [--repeats 3]

Builds a raw output of ``--samples`` samples the way a job does: dataset.json from
``runner.output.store.describe`` pinned by ``Store.pin``, each sample written by
``ckpt.write_sample`` into the store's temp dir and committed by ``Store.commit`` (manifest
line, then the rename into ``rows_0-2000/``). The states are bench.storage's heavy-tailed
synthetic ones (one seed per sample), so they compress about as real states do.

Then, interleaved, each ``--repeats`` times (the median is reported):

* ``cat`` of every sample file to /dev/null (the baseline: reading the bytes and nothing else);
* ``runner.output.compact.compact`` of the output to [job] storage = "ckpt.gz" (lossless), then,
  untimed, compact back to "ckpt", whose manifest checksums must equal the first build's: the
  next round starts from the same raw files.

Last, once (rounding cannot be undone): compact to "ckpt.gz" with [job] mantissa_bits = 4.

MB/s is of the raw input (the ``.ckpt`` bytes) over wall time; "per CPU s" is the same bytes over
the CPU time the method used (compact's worker threads, or the cat process), i.e. MB/s per core.
No cache is dropped: every method reads files left in the page cache by the write before it
(the machine's RAM permitting), the same for cat and compact. Prints a table, then one JSON line.
Files are removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

import torch

from bench.common import mb_s
from bench.storage import synthetic_sample
from runner.codec import ckpt
from runner.contract.config import Config, from_dict
from runner.output.compact import WORKERS, compact
from runner.output.store import Store, describe
from runner.output.verify import scan

AUX = [1, 3, 5]  # the aux layer ids dataset.json records (any three; nothing reads them here)


def config(root: str, seq: int, **job) -> Config:
    return from_dict(
        {"job": {"model": "model", "dataset": "data.jsonl", "out": "out", "max_length": seq, **job}},
        base_dir=root,
    )


def build(root: str, samples: int, seq: int, hidden: int) -> dict[int, str]:
    """The raw output under ``root/out``; returns each sample's checksum."""
    cfg = config(root, seq)
    store = Store(cfg.job.out)
    store.prepare()
    info = {"hidden_size": hidden, "num_layers": 8, "dtype": "bfloat16"}
    store.pin(describe(cfg, info, AUX, "bench", samples, cfg.job.tokenizer or cfg.job.model))
    sums = {}
    for idx in range(samples):
        tmp = os.path.join(store.tmp, f"{idx}.ckpt")
        nbytes, sums[idx] = ckpt.write_sample(tmp, **synthetic_sample(seq, hidden, seed=idx))
        store.commit(idx, tmp, seq, nbytes, sums[idx])
    return sums


def files(out: str) -> list[str]:
    found = scan(out)
    if any(len(p) != 1 for p in found.values()):
        raise RuntimeError(f"a sample is present twice: {found}")
    return [found[i][0] for i in sorted(found)]


def on_disk(out: str) -> int:
    return sum(os.path.getsize(p) for p in files(out))


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def run_cat(out: str) -> tuple[float, float]:
    """(wall s, CPU s) of cat of every sample file to /dev/null."""
    paths = files(out)
    c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0, _cpu(resource.RUSAGE_CHILDREN) - c0


def run_compact(cfg: Config, samples: int) -> tuple[float, float, dict]:
    """(wall s, CPU s of this process, compact's report); every sample must be re-encoded."""
    c0, t0 = _cpu(resource.RUSAGE_SELF), time.perf_counter()
    rep = compact(cfg)
    wall, cpu = time.perf_counter() - t0, _cpu(resource.RUSAGE_SELF) - c0
    if rep["recoded"] != samples or not rep["complete"]:
        raise RuntimeError(f"compact to {cfg.job.storage} did not re-encode all {samples} samples: {rep}")
    return wall, cpu, rep


def restore(root: str, seq: int, samples: int, sums: dict[int, str]) -> None:
    """Compact back to raw; the files must be the first build's, byte for byte (by checksum)."""
    cfg = config(root, seq, storage="ckpt")
    run_compact(cfg, samples)
    got = {i: e["checksum"] for i, e in Store(cfg.job.out).manifest().items()}
    if got != sums or not all(p.endswith(".ckpt") for p in files(cfg.job.out)):
        raise RuntimeError("compact back to ckpt did not give the raw files back")


def measure(root: str, samples: int, seq: int, hidden: int, repeats: int) -> dict:
    sums = build(root, samples, seq, hidden)
    out = os.path.join(root, "out")
    raw = on_disk(out)
    gz, gz4 = config(root, seq, storage="ckpt.gz"), config(root, seq, storage="ckpt.gz", mantissa_bits=4)
    times: dict[str, list[tuple[float, float]]] = {"cat": [], "ckpt.gz": []}
    stored: dict[str, int] = {"cat": raw}
    for _ in range(repeats):
        times["cat"].append(run_cat(out))
        wall, cpu, rep = run_compact(gz, samples)
        times["ckpt.gz"].append((wall, cpu))
        stored["ckpt.gz"] = on_disk(out)
        if rep["freed"] != raw - stored["ckpt.gz"]:
            raise RuntimeError(
                f"compact reports {rep['freed']} bytes freed; the files shrank by {raw - stored['ckpt.gz']}"
            )
        restore(root, seq, samples, sums)
    wall, cpu, _ = run_compact(gz4, samples)
    times["ckpt.gz, 4 mantissa bits"] = [(wall, cpu)]
    stored["ckpt.gz, 4 mantissa bits"] = on_disk(out)
    res: dict = {}
    for name, runs in times.items():
        walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
        res[name] = {
            "runs": len(runs), "wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
            "mb_s": mb_s(raw, walls), "mb_per_cpu_s": mb_s(raw, cpus),
            "bytes_after": stored[name], "freed": raw - stored[name], "smaller_by": raw / stored[name],
        }  # fmt: skip
    for r in res.values():
        r["vs_cat"] = r["mb_s"] / res["cat"]["mb_s"]
    return {"raw_bytes": raw, "methods": res}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.compact", description=__doc__.split("\n")[0])
    p.add_argument("--dir", default=None, help="a folder on the disk to measure (default: a temp dir)")
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    if min(a.samples, a.seq, a.hidden, a.repeats) < 1 or a.seq < 2:
        p.error("--samples, --hidden and --repeats must be positive, --seq at least 2")

    root = tempfile.mkdtemp(prefix=".hsx-bench-compact-", dir=a.dir)
    try:
        res = measure(root, a.samples, a.seq, a.hidden, a.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    raw = res["raw_bytes"]
    print(
        f"disk: {os.path.abspath(a.dir or tempfile.gettempdir())}   {a.samples} samples x seq {a.seq} x H {a.hidden} "
        f"bf16, synthetic heavy-tailed, {raw / a.samples / 1e6:.1f} MB each ({raw / 1e9:.2f} GB); "
        f"compact runs {WORKERS} worker threads on {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; "
        "page cache not dropped"
    )
    print(
        f"{'method':34s} {'runs':>4s} {'MB/s':>8s} {'÷ cat':>6s} {'per CPU s':>9s} {'freed MB':>9s} {'smaller by':>10s}"
    )
    for name, r in res["methods"].items():
        shown = "cat > /dev/null" if name == "cat" else f"compact to {name}"
        per_cpu = "—" if r["mb_per_cpu_s"] is None else f"{r['mb_per_cpu_s']:,.0f}"
        print(
            f"{shown:34s} {r['runs']:4d} {r['mb_s']:8,.0f} {r['vs_cat']:6.3f} {per_cpu:>9s} "
            f"{r['freed'] / 1e6:9,.0f} {r['smaller_by']:9.3f}×"
        )
    print("(MB/s and per CPU s: of the raw .ckpt bytes read; the 4-bit row is one run, from the raw output)")
    report = {
        "bench": "compact", "dir": os.path.abspath(a.dir or tempfile.gettempdir()), "samples": a.samples,
        "seq": a.seq, "hidden": a.hidden, "repeats": a.repeats, "workers": WORKERS, "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cache": "not dropped", **res,
    }  # fmt: skip
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
