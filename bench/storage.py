"""Sample storage: bytes on disk, encode and decode speed per core, and error, for each way to
store a sample, against SpecForge's own ``--compress`` format (gzip) measured in the same run.

    .venv/bin/python -m bench.storage [--samples 4] [--seq 2048] [--hidden 7168] [--repeats 3]
                                      [--ref-samples 2] [--specforge DIR] [--dir D]

Modes, each of the same sample (``runner.codec.ckpt``'s torch.save bytes, what
``write_sample`` writes today):

* ``raw``: the ``.ckpt`` as is (the ratios' denominator);
* ``gzip -1, zlib``: ``.ckpt.gz``, Python's ``gzip.compress(data, 1)`` (the baseline: standard
  gzip as any Python writes it; SpecForge's ``--compress`` is the same format at level 6);
* ``gzip -1, ISA-L``: ``isal.igzip.compress(data, 1)``, standard gzip too;
* ``4 / 3 mantissa bits``: hidden states rounded by ``runner.codec.precision.round_mantissa``
  (still bf16), then ISA-L gzip -1. Lossy: the relative error of each tensor is reported.

Encode MB/s: the sample's uncompressed bytes over the time of the work a mode adds to
``write_sample`` (compressing; rounding too for the lossy modes; the torch.save that every mode
shares is not timed), one thread (torch too). Decode MB/s: ``gzip.decompress`` (the gunzip
SpecForge's reader runs) over the same bytes. Timings are medians of ``--repeats``, modes
interleaved. Every stored form is gunzipped and torch.load-ed back and must equal, bit for bit,
what was written: the sample, or for the lossy modes round_mantissa's output.

Two kinds of states:

* ``synthetic``: seq x hidden bf16, fixed seed, residual-stream-like aux layers (normal values,
  per-channel and per-token scales, growing with depth) with ``MASSIVE_CHANNELS`` channels of
  magnitude 300-1000 ("massive activations"), and a final-norm state of normal values;
* ``reference``: the project's tiny demo model (runner.data.demo_assets, built in a temp dir, H=64)
  run by the reference backend's ``Model`` on dataset rows packed to ``--seq`` tokens: real
  final-norm and aux states, but small and from a random model.

``--specforge DIR``: DIR is a SpecForge source checkout; its offline loader
(``specforge.data.preprocessing``: ``list_local_files``, ``OfflineEagle3Dataset``) is imported
from there and reads a folder of the synthetic samples as ``.ckpt`` (write_sample) and as
``.ckpt.gz`` (ISA-L gzip -1 of the same bytes), written under ``--dir``; samples/s on one thread,
each item's tensors copied once (as the collator's padding does, so mmap-ed pages are read),
warm page cache. Without it that part is skipped, and the output says so.
Prints a table per kind, then one JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass

import torch

from bench.common import mb_s
from runner.codec import ckpt
from runner.codec.precision import relative_error, round_mantissa
from tests.specforge_reader import load_specforge

MASSIVE_CHANNELS = 4
MASSIVE_RANGE = (300.0, 1000.0)
LAYER_SCALES = (0.3, 1.0, 3.0)  # the three aux layers' typical magnitude, shallow to deep
VOCAB = 150_000
REF_MAX_SEQ = 4096  # the demo model's max_position_embeddings
REF_ROWS = 300  # demo dataset rows built; rows are packed into --seq-token samples


@dataclass(frozen=True)
class Mode:
    key: str
    label: str
    compressor: str | None  # None: stored as is
    bits: int | None = None  # mantissa bits kept; None: lossless


MODES = (
    Mode("raw", "raw .ckpt", None),
    Mode("gzip1_zlib", "gzip -1, zlib (baseline)", "zlib"),
    Mode("gzip1_isal", "gzip -1, ISA-L", "isal"),
    Mode("m4_isal", "4 mantissa bits + ISA-L -1", "isal", 4),
    Mode("m3_isal", "3 mantissa bits + ISA-L -1", "isal", 3),
)
BASELINE = "gzip1_zlib"


def compressors() -> dict:
    from isal import igzip  # the runner extra's; a plain `pip install isal` otherwise

    return {
        "zlib": lambda data: gzip.compress(data, compresslevel=1, mtime=0),
        "isal": lambda data: igzip.compress(data, 1, mtime=0),
    }


# --- the states ------------------------------------------------------------------------------


def synthetic_sample(seq: int, hidden: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A sample of heavy-tailed bf16 states: see the module's docstring. The same
    ``MASSIVE_CHANNELS`` channel indices (``massive_channels(hidden, seed)``) are massive in
    every aux layer, as massive activations persist through the residual stream."""
    g = torch.Generator().manual_seed(seed)
    token_scale = torch.exp(0.3 * torch.randn(seq, 1, generator=g))
    heavy = massive_channels(hidden, seed)
    layers = []
    for scale in LAYER_SCALES:
        channel_scale = torch.exp(0.5 * torch.randn(1, hidden, generator=g))
        x = torch.randn(seq, hidden, generator=g) * (scale * channel_scale * token_scale)
        lo, hi = MASSIVE_RANGE
        mags = lo + (hi - lo) * torch.rand(seq, len(heavy), generator=g)
        signs = torch.where(torch.rand(1, len(heavy), generator=g) < 0.5, -1.0, 1.0)
        x[:, heavy] = mags * signs
        layers.append(x)
    final = torch.randn(seq, hidden, generator=g) * (0.5 + torch.rand(1, hidden, generator=g))
    return {
        "input_ids": torch.randint(0, VOCAB, (seq,), generator=g),
        "loss_mask": (torch.arange(seq) >= seq // 4).to(torch.int64),
        "hidden_state": final.to(torch.bfloat16)[None],
        "aux_hidden_state": torch.cat(layers, dim=-1).to(torch.bfloat16)[None],
    }


def massive_channels(hidden: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed + 1)
    return sorted(torch.randperm(hidden, generator=g)[: min(MASSIVE_CHANNELS, hidden)].tolist())


def reference_samples(workdir: str, count: int, seq: int) -> list[dict[str, torch.Tensor]]:
    """``count`` samples of the demo model's own states: dataset rows tokenized as the job
    does (runner.data.dataset), packed to ``seq`` tokens, run by runner.serve.reference_server.Model."""
    from runner.data import demo_assets
    from runner.data.dataset import Dataset, load_tokenizer
    from runner.serve.reference_server import Model

    demo_assets.build(workdir, REF_ROWS, 0)
    model_dir = os.path.join(workdir, "model")
    data = Dataset(os.path.join(workdir, "data.jsonl"), load_tokenizer(model_dir), max_length=seq)
    model = Model(model_dir, "cpu", "bfloat16", threads=1, aux_ids=[])
    out, row = [], 0
    for _ in range(count):
        ids, mask = [], []
        while len(ids) < seq and row < len(data):
            s = data.get(row)
            ids, mask, row = ids + s.input_ids, mask + s.loss_mask, row + 1
        if not ids:
            break
        ids, mask = ids[:seq], mask[:seq]
        final, aux, _ = model.forward(ids)
        out.append({
            "input_ids": torch.tensor(ids, dtype=torch.int64),
            "loss_mask": torch.tensor(mask, dtype=torch.int64),
            "hidden_state": final,
            "aux_hidden_state": aux,
        })  # fmt: skip
    data.close()
    return out


# --- encoding, decoding, checking ------------------------------------------------------------


def serialize(sample: dict[str, torch.Tensor]) -> bytes:
    """The bytes ``write_sample`` writes for this sample (same dict, same CRC-off torch.save),
    made in memory."""
    buf = io.BytesIO()
    with ckpt._zip_crc_off():
        torch.save(ckpt._sample_dict(*(sample[k] for k in ckpt.KEYS)), buf)
    return buf.getvalue()


def encode(mode: Mode, sample: dict, comp: dict) -> tuple[bytes, dict, float]:
    """(stored bytes, the sample they hold, seconds of the mode's own work)."""
    if mode.bits is None:
        raw = serialize(sample)
        if mode.compressor is None:
            return raw, sample, 0.0
        t0 = time.perf_counter()
        blob = comp[mode.compressor](raw)
        return blob, sample, time.perf_counter() - t0
    t0 = time.perf_counter()
    hs = round_mantissa(sample["hidden_state"], mode.bits)
    aux = round_mantissa(sample["aux_hidden_state"], mode.bits)
    rounding = time.perf_counter() - t0
    held = {**sample, "hidden_state": hs, "aux_hidden_state": aux}
    raw = serialize(held)
    t0 = time.perf_counter()
    blob = comp[mode.compressor](raw)
    return blob, held, rounding + time.perf_counter() - t0


def decode(mode: Mode, blob: bytes) -> tuple[bytes, float]:
    """(the torch.save bytes, seconds of gunzip)."""
    if mode.compressor is None:
        return blob, 0.0
    t0 = time.perf_counter()
    raw = gzip.decompress(blob)
    return raw, time.perf_counter() - t0


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.contiguous().view(ints), b.contiguous().view(ints)
    return torch.equal(a, b)


def mismatch(raw: bytes, held: dict) -> str | None:
    """What differs between the sample in ``raw`` (torch.save bytes) and ``held``; None: they
    are equal bit for bit, dtypes and shapes included."""
    loaded = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    if not isinstance(loaded, dict) or set(loaded) != set(ckpt.KEYS):
        return f"holds {sorted(loaded) if isinstance(loaded, dict) else type(loaded).__name__}"
    bad = [k for k in ckpt.KEYS if not _same_bits(loaded[k], held[k])]
    return f"{bad} differ" if bad else None


def measure(samples: list[dict], repeats: int, modes=MODES, comp: dict | None = None) -> dict:
    """Per mode: bytes, encode/decode seconds (median of ``repeats`` per sample, summed over
    samples), worst relative error per tensor. Raises RuntimeError if a stored form does not
    give back what was written."""
    comp = comp or compressors()
    zero = {"raw_bytes": 0, "stored_bytes": 0, "encode_s": 0.0, "decode_s": 0.0}
    res = {m.key: {**zero, "err_hidden": 0.0, "err_aux": 0.0} for m in modes}
    for n, sample in enumerate(samples):
        raw_len = len(serialize(sample))
        enc: dict[str, list[float]] = {m.key: [] for m in modes}
        dec: dict[str, list[float]] = {m.key: [] for m in modes}
        for rep in range(repeats):
            for m in modes:
                blob, held, dt = encode(m, sample, comp)
                enc[m.key].append(dt)
                raw, dt = decode(m, blob)
                dec[m.key].append(dt)
                if rep:
                    continue
                r = res[m.key]
                r["raw_bytes"] += raw_len
                r["stored_bytes"] += len(blob)
                why = mismatch(raw, held)
                if why:
                    raise RuntimeError(f"{m.label}: sample {n} does not round-trip: {why}")
                for k, err in (("hidden_state", "err_hidden"), ("aux_hidden_state", "err_aux")):
                    if m.bits is not None:
                        r[err] = max(r[err], relative_error(sample[k], held[k]))
                del blob, held, raw
        for m in modes:
            res[m.key]["encode_s"] += statistics.median(enc[m.key])
            res[m.key]["decode_s"] += statistics.median(dec[m.key])
    for m in modes:
        r = res[m.key]
        r["label"] = m.label
        r["lossless"] = m.bits is None
        r["bytes_ratio"] = r["stored_bytes"] / r["raw_bytes"]
        r["encode_mb_s"] = r["raw_bytes"] / r["encode_s"] / 1e6 if r["encode_s"] else None
        r["decode_mb_s"] = r["raw_bytes"] / r["decode_s"] / 1e6 if r["decode_s"] else None
    base = res.get(BASELINE, {}).get("encode_mb_s")
    for r in res.values():
        r["encode_vs_baseline"] = r["encode_mb_s"] / base if base and r["encode_mb_s"] else None
    return res


def table(title: str, res: dict) -> list[str]:
    def num(v, fmt, width):
        return f"{'—' if v is None else format(v, fmt):>{width}s}"

    lines = [
        title,
        f"  {'mode':28s} {'bytes ÷ raw':>11s} {'smaller by':>10s} {'encode MB/s':>11s} "
        f"{'enc÷zlib':>9s} {'decode MB/s':>11s} {'err final':>9s} {'err aux':>8s}",
    ]
    for r in res.values():
        err = ("0", "0") if r["lossless"] else (f"{r['err_hidden']:.2%}", f"{r['err_aux']:.2%}")
        lines.append(
            f"  {r['label']:28s} {r['bytes_ratio']:11.3f} {1 / r['bytes_ratio']:9.3f}× "
            f"{num(r['encode_mb_s'], ',.0f', 11)} {num(r['encode_vs_baseline'], '.2f', 9)} "
            f"{num(r['decode_mb_s'], ',.0f', 11)} {err[0]:>9s} {err[1]:>8s}"
        )
    return lines


# --- SpecForge's own reader ------------------------------------------------------------------


def write_dirs(root: str, samples: list[dict], comp: dict) -> tuple[str, str]:
    """The samples as SpecForge-layout folders: ``ckpt/`` (write_sample) and ``gz/`` (ISA-L
    gzip -1 of each file's bytes)."""
    from runner.output.store import sample_path

    plain, packed = os.path.join(root, "ckpt"), os.path.join(root, "gz")
    for idx, s in enumerate(samples):
        path = sample_path(plain, idx)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        ckpt.write_sample(path, **{k: s[k] for k in ckpt.KEYS})
        gz = sample_path(packed, idx) + ".gz"
        os.makedirs(os.path.dirname(gz), exist_ok=True)
        with open(path, "rb") as f, open(gz, "wb") as out:
            out.write(comp["isal"](f.read()))
    return plain, packed


def read_all(mod, folder: str, max_len: int, keep: bool) -> tuple[list[dict], float]:
    """Every item of SpecForge's loader over ``folder``, its tensors copied (kept if ``keep``);
    (items, seconds)."""
    ds = mod.OfflineEagle3Dataset(mod.list_local_files(folder), max_len=max_len)
    items = []
    t0 = time.perf_counter()
    for i in range(len(ds)):
        item = {k: v.clone() for k, v in ds[i].items()}
        if keep:
            items.append(item)
    return items, time.perf_counter() - t0


def specforge_read(mod, root: str, samples: list[dict], repeats: int, comp: dict) -> dict:
    """samples/s of SpecForge's loader over the samples as .ckpt and as .ckpt.gz, whose items
    must be equal bit for bit."""
    plain, packed = write_dirs(root, samples, comp)
    max_len = max(s["input_ids"].shape[0] for s in samples)
    a, _ = read_all(mod, plain, max_len, keep=True)  # untimed: the check, and a warm cache
    b, _ = read_all(mod, packed, max_len, keep=True)
    if len(a) != len(samples) or len(b) != len(samples):
        raise RuntimeError(f"SpecForge found {len(a)} .ckpt and {len(b)} .ckpt.gz of {len(samples)} samples")
    for x, y in zip(a, b, strict=True):
        bad = sorted(k for k in x.keys() | y.keys() if k not in x or k not in y or not _same_bits(x[k], y[k]))
        if bad:
            raise RuntimeError(f"SpecForge's items from .ckpt and .ckpt.gz differ in {bad}")
    del a, b
    times: dict[str, list[float]] = {"ckpt": [], "ckpt.gz": []}
    for _ in range(repeats):
        times["ckpt"].append(read_all(mod, plain, max_len, keep=False)[1])
        times["ckpt.gz"].append(read_all(mod, packed, max_len, keep=False)[1])
    n = len(samples)
    raw = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(plain) for f in fs)
    out: dict = {"files": n, "raw_mb_per_sample": raw / n / 1e6}
    for k, v in times.items():
        out[k] = {"samples_s": n / statistics.median(v), "mb_s": mb_s(raw, v)}
    out["gz_over_ckpt"] = out["ckpt.gz"]["samples_s"] / out["ckpt"]["samples_s"]
    return out


# --- the run ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.storage", description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=4, help="synthetic samples (default 4)")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=7168, help="synthetic states' hidden size")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ref-samples", type=int, default=2, help="demo-model samples (0: none)")
    p.add_argument("--specforge", metavar="DIR", help="a SpecForge checkout: time its offline reader")
    p.add_argument("--dir", default=None, help="where --specforge's files go (default: a temp dir)")
    a = p.parse_args(argv)
    if min(a.samples, a.seq, a.hidden, a.repeats) < 1 or a.ref_samples < 0:
        p.error("--samples, --seq, --hidden and --repeats must be positive, --ref-samples >= 0")

    torch.set_num_threads(1)  # per core: zlib and ISA-L are single-threaded anyway
    comp = compressors()
    kinds: dict = {}
    report: dict = {"bench": "storage", "seq": a.seq, "hidden": a.hidden, "repeats": a.repeats, "threads": 1}
    report["kinds"] = kinds
    work = tempfile.mkdtemp(prefix=".hsx-bench-storage-", dir=a.dir)
    rc = 0
    try:
        synth = [synthetic_sample(a.seq, a.hidden, seed) for seed in range(a.samples)]
        kinds["synthetic"] = {
            "samples": len(synth), "seq": a.seq, "hidden": a.hidden,
            "massive_channels": MASSIVE_CHANNELS, "modes": measure(synth, a.repeats, comp=comp),
        }  # fmt: skip
        if a.ref_samples:
            seq = min(a.seq, REF_MAX_SEQ)
            ref = reference_samples(os.path.join(work, "demo"), a.ref_samples, seq)
            if not ref:
                raise RuntimeError("the demo dataset gave no tokens")
            kinds["reference"] = {
                "samples": len(ref), "seq": [s["input_ids"].shape[0] for s in ref],
                "hidden": ref[0]["hidden_state"].shape[-1], "modes": measure(ref, a.repeats, comp=comp),
            }  # fmt: skip
        if a.specforge:
            try:
                mod = load_specforge(a.specforge)
            except Exception as e:  # ImportError, or whatever its module-level code raises
                report["specforge"] = {
                    "skipped": f"cannot import SpecForge's loader: {type(e).__name__}: {e}"
                }
                rc = 1
            else:
                report["specforge"] = specforge_read(mod, os.path.join(work, "sf"), synth, a.repeats, comp)
        else:
            report["specforge"] = {"skipped": "no --specforge DIR given"}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"one thread (per core); encode and decode MB/s over the uncompressed sample; median of {a.repeats}"
    )
    for kind, k in kinds.items():
        seqs = k["seq"] if isinstance(k["seq"], int) else "/".join(map(str, k["seq"]))
        mb = k["modes"]["raw"]["raw_bytes"] / k["samples"] / 1e6
        title = f"{kind}: {k['samples']} samples, seq {seqs} x H {k['hidden']} bf16, {mb:.1f} MB each"
        print("\n".join(table(title, k["modes"])))
    sf = report["specforge"]
    if "skipped" in sf:
        print(f"SpecForge offline reader: skipped ({sf['skipped']})")
    else:
        print(
            f"SpecForge offline reader, one thread, {sf['files']} synthetic samples x {sf['raw_mb_per_sample']:.1f} MB, "
            f"warm cache: .ckpt {sf['ckpt']['samples_s']:.2f} samples/s ({sf['ckpt']['mb_s']:,.0f} MB/s), "
            f".ckpt.gz {sf['ckpt.gz']['samples_s']:.2f} samples/s ({sf['ckpt.gz']['mb_s']:,.0f} MB/s), "
            f"gz ÷ ckpt {sf['gz_over_ckpt']:.3f}"
        )
    print(json.dumps(report))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
