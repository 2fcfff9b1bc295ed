"""Resume planning with many committed samples: how long ``Store.plan`` takes.

Builds N committed samples (empty files in their shard dirs + manifest lines; planning
never opens them), then times planning. Baseline in the same run: a stat of every file,
which is what "skip if the file exists" resume does.

    python -m bench.plan [--samples 1000000] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import orjson

from runner.output.store import COMPLETE_DIR, SHARD, Store, sample_path, shard_name


def build(out: str, n: int) -> None:
    os.makedirs(out, exist_ok=True)
    lines = []
    for idx in range(n):
        p = sample_path(out, idx)
        if idx % 2000 == 0:
            os.makedirs(os.path.dirname(p), exist_ok=True)
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
        rec = {"idx": idx, "seq": 3000, "bytes": 170_000_000, "checksum": "0123456789abcdef",
               "shard": shard_name(idx), "written_at": "2026-11-29T10:00:00.000Z"}  # fmt: skip
        lines.append(orjson.dumps(rec))
    with open(os.path.join(out, "manifest.jsonl"), "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    # as the runner does when a shard's last sample settles
    os.makedirs(os.path.join(out, COMPLETE_DIR), exist_ok=True)
    for g in range(0, n - n % SHARD, SHARD):
        open(os.path.join(out, COMPLETE_DIR, shard_name(g)), "w").close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    out = tempfile.mkdtemp(prefix="hsx-plan-", dir=a.dir)
    try:
        t = time.perf_counter()
        build(out, a.samples)
        print(f"built {a.samples:,} committed samples in {time.perf_counter() - t:.1f}s")
        store = Store(out)
        times = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            plan = store.plan(a.samples + 10)
            times.append(time.perf_counter() - t)
        assert len(plan.committed) == a.samples and plan.remaining == list(range(a.samples, a.samples + 10))
        shutil.rmtree(os.path.join(out, COMPLETE_DIR))
        t = time.perf_counter()
        plan = store.plan(a.samples + 10)
        no_markers = time.perf_counter() - t
        assert len(plan.committed) == a.samples
        print(f"plan without completion markers (list every shard, parse the manifest): {no_markers:.3f}s")
        t = time.perf_counter()
        missing = [i for i in range(a.samples) if not os.path.exists(sample_path(out, i))]
        stat_all = time.perf_counter() - t
        assert not missing
        best = min(times)
        print(f"plan: {best:.3f}s (best of {a.repeats}; all {', '.join(f'{x:.3f}' for x in times)})")
        print(f"stat every file: {stat_all:.3f}s")
        print(
            f"bench/README.md: | resume planning, {a.samples:,} samples | {best:.2f} s | stat-every-file {stat_all:.2f} s | ratio {best / stat_all:.2f} |"
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
