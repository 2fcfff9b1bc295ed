"""bench/storage.py's own pieces at tiny sizes: the synthetic states, the encodings and their
round trips, the report, and the SpecForge import (against a stand-in checkout)."""

from __future__ import annotations

import gzip
import io
import json
import sys
import textwrap

import pytest
import torch

from bench import storage as st
from runner.codec import ckpt
from runner.codec.precision import round_mantissa

SEQ, H = 24, 40
MODE = {m.key: m for m in st.MODES}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


def aux_layers(sample) -> list[torch.Tensor]:
    return list(sample["aux_hidden_state"][0].float().split(H, dim=-1))


def test_synthetic_states_have_the_massive_channels_and_nothing_else_that_large():
    s = st.synthetic_sample(SEQ, H, seed=3)
    assert s["hidden_state"].shape == (1, SEQ, H) and s["aux_hidden_state"].shape == (1, SEQ, 3 * H)
    assert s["hidden_state"].dtype == s["aux_hidden_state"].dtype == torch.bfloat16
    heavy = st.massive_channels(H, seed=3)
    assert len(heavy) == st.MASSIVE_CHANNELS == 4
    lo, hi = st.MASSIVE_RANGE
    for layer in aux_layers(s):
        peak = layer.abs().amax(dim=0)
        assert sorted(torch.nonzero(peak >= lo).flatten().tolist()) == heavy
        assert bool((layer[:, heavy].abs() >= lo).all()) and bool((layer[:, heavy].abs() <= hi).all())
        others = [c for c in range(H) if c not in heavy]
        assert float(peak[others].max()) < lo / 2  # the bulk: residual-sized, far below the heavy ones
    assert float(s["hidden_state"].float().abs().max()) < 10  # the final norm's output has none
    scales = [float(layer[:, [c for c in range(H) if c not in heavy]].std()) for layer in aux_layers(s)]
    assert scales[0] < scales[1] < scales[2]  # deeper layers are larger


def test_synthetic_states_are_fixed_by_the_seed():
    a, b, c = st.synthetic_sample(SEQ, H, 0), st.synthetic_sample(SEQ, H, 0), st.synthetic_sample(SEQ, H, 1)
    assert all(st._same_bits(a[k], b[k]) for k in ckpt.KEYS)
    assert not torch.equal(bits(a["aux_hidden_state"]), bits(c["aux_hidden_state"]))


def test_serialize_gives_the_bytes_write_sample_writes(tmp_path):
    s = st.synthetic_sample(SEQ, H)
    path = tmp_path / "data_0.ckpt"
    ckpt.write_sample(path, **s)
    assert st.serialize(s) == path.read_bytes()


@pytest.mark.parametrize("key", [m.key for m in st.MODES])
def test_every_mode_round_trips_bit_for_bit(key):
    mode, s, comp = MODE[key], st.synthetic_sample(SEQ, H), st.compressors()
    blob, held, _ = st.encode(mode, s, comp)
    if mode.compressor:
        assert blob[:2] == b"\x1f\x8b"  # a gzip member, which Python's gzip reads
    raw, _ = st.decode(mode, blob)
    assert st.mismatch(raw, held) is None
    loaded = torch.load(io.BytesIO(gzip.decompress(blob) if mode.compressor else blob), weights_only=True)
    for k in ("hidden_state", "aux_hidden_state"):
        want = s[k] if mode.bits is None else round_mantissa(s[k], mode.bits)
        assert torch.equal(bits(loaded[k]), bits(want))
    assert torch.equal(loaded["input_ids"], s["input_ids"]) and torch.equal(
        loaded["loss_mask"], s["loss_mask"]
    )


def test_the_round_trip_check_catches_a_changed_bit_and_the_rounding():
    s = st.synthetic_sample(SEQ, H)
    raw = st.serialize(s)
    flipped = {**s, "aux_hidden_state": s["aux_hidden_state"].clone()}
    flipped["aux_hidden_state"].view(torch.int16)[0, 5, 7] ^= 1
    assert st.mismatch(raw, flipped) == "['aux_hidden_state'] differ"
    lossy, held, _ = st.encode(MODE["m4_isal"], s, st.compressors())
    assert st.mismatch(gzip.decompress(lossy), s) == "['hidden_state', 'aux_hidden_state'] differ"
    wrong_dtype = {**s, "hidden_state": s["hidden_state"].float()}
    assert st.mismatch(raw, wrong_dtype) == "['hidden_state'] differ"


def test_measure_carries_every_mode_with_sane_figures():
    samples = [st.synthetic_sample(SEQ, H, seed) for seed in range(2)]
    res = st.measure(samples, repeats=2)
    assert list(res) == [m.key for m in st.MODES]
    raw = res["raw"]["raw_bytes"]
    assert raw == sum(len(st.serialize(s)) for s in samples)
    assert all(r["raw_bytes"] == raw for r in res.values())
    assert res["raw"]["bytes_ratio"] == 1.0 and res["raw"]["encode_mb_s"] is None
    for key in ("gzip1_zlib", "gzip1_isal", "m4_isal", "m3_isal"):
        assert res[key]["encode_mb_s"] > 0 and res[key]["decode_mb_s"] > 0
        assert res[key]["bytes_ratio"] < 1
    assert res["gzip1_zlib"]["encode_vs_baseline"] == 1.0
    assert res["m3_isal"]["bytes_ratio"] < res["m4_isal"]["bytes_ratio"] < res["gzip1_isal"]["bytes_ratio"]
    for key in ("raw", "gzip1_zlib", "gzip1_isal"):
        assert res[key]["lossless"] and res[key]["err_hidden"] == res[key]["err_aux"] == 0.0
    for key, bound in (("m4_isal", 2**-5), ("m3_isal", 2**-4)):  # half an ulp, relative
        assert not res[key]["lossless"]
        assert 0 < res[key]["err_hidden"] < bound and 0 < res[key]["err_aux"] < bound
    assert res["m4_isal"]["err_aux"] < res["m3_isal"]["err_aux"]


def test_measure_refuses_a_mode_that_does_not_round_trip():
    other = st.serialize(st.synthetic_sample(SEQ, H, seed=9))
    swapped = {"isal": lambda _: gzip.compress(other, 1)}  # stores another sample
    with pytest.raises(RuntimeError, match="does not round-trip"):
        st.measure([st.synthetic_sample(SEQ, H)], 1, modes=(MODE["gzip1_isal"],), comp=swapped)


def test_main_prints_a_table_and_one_json_line_with_every_mode(capsys):
    assert (
        st.main(["--samples", "1", "--seq", "16", "--hidden", "32", "--repeats", "1", "--ref-samples", "0"])
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    report = json.loads(out[-1])
    assert sum(line.startswith("{") for line in out) == 1
    modes = report["kinds"]["synthetic"]["modes"]
    assert list(modes) == [m.key for m in st.MODES]
    for m in st.MODES:
        assert sum(m.label in line for line in out[:-1]) == 1
        assert modes[m.key]["label"] == m.label
    assert report["specforge"] == {"skipped": "no --specforge DIR given"}
    assert "SpecForge offline reader: skipped (no --specforge DIR given)" in out


def test_main_reports_a_specforge_that_cannot_be_imported(tmp_path, capsys):
    argv = ["--samples", "1", "--seq", "8", "--hidden", "16", "--repeats", "1", "--ref-samples", "0"]
    assert st.main([*argv, "--specforge", str(tmp_path)]) == 1
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert "is not a SpecForge checkout" in report["specforge"]["skipped"]


# A stand-in checkout: the same names and file layout as SpecForge's, its loader written here.
FAKE_PREPROCESSING = """
import gzip, io, os, torch

def list_local_files(path, suffixes=(".ckpt", ".ckpt.gz")):
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs if f.endswith(suffixes))

class OfflineEagle3Dataset(torch.utils.data.Dataset):
    def __init__(self, datapath, max_len=2048):
        self.datapaths, self.max_len = datapath, max_len
    def __len__(self):
        return len(self.datapaths)
    def __getitem__(self, i):
        p = self.datapaths[i]
        if p.endswith(".gz"):
            with gzip.open(p, "rb") as f:
                d = torch.load(io.BytesIO(f.read()), weights_only=False)
        else:
            d = torch.load(p, weights_only=False, mmap=True)
        return {"hidden_state": d["aux_hidden_state"][:, : self.max_len], "target": d["hidden_state"],
                "input_ids": d["input_ids"][None], "loss_mask": d["loss_mask"][None]}
"""


@pytest.fixture
def fake_specforge(tmp_path):
    data = tmp_path / "sf" / "specforge" / "data"
    data.mkdir(parents=True)
    (data.parent / "__init__.py").write_text("")
    (data / "__init__.py").write_text("")
    (data / "preprocessing.py").write_text(textwrap.dedent(FAKE_PREPROCESSING))
    (tmp_path / "sf" / "datasets").mkdir()  # SpecForge's checkout has one; it must not shadow anything
    # the real SpecForge an earlier test of this process imported (the session's `specforge`) is
    # put aside while the fake one is loaded, and back after
    real = {
        n: sys.modules.pop(n) for n in list(sys.modules) if n == "specforge" or n.startswith("specforge.")
    }
    yield tmp_path / "sf"
    for name in [n for n in sys.modules if n == "specforge" or n.startswith("specforge.")]:
        del sys.modules[name]
    sys.modules.update(real)


def test_specforge_loader_reads_both_folders_from_the_checkout(fake_specforge, tmp_path):
    mod = st.load_specforge(str(fake_specforge))
    assert mod.__file__ == str(fake_specforge / "specforge" / "data" / "preprocessing.py")
    samples = [st.synthetic_sample(SEQ, H, seed) for seed in range(3)]
    res = st.specforge_read(mod, str(tmp_path / "out"), samples, 1, st.compressors())
    assert res["files"] == 3
    assert res["ckpt"]["samples_s"] > 0 and res["ckpt.gz"]["samples_s"] > 0
    assert sorted(p.name for p in (tmp_path / "out" / "gz" / "rows_0-2000").iterdir()) == [
        f"data_{i}.ckpt.gz" for i in range(3)
    ]
    assert res["raw_mb_per_sample"] * 1e6 == pytest.approx(len(st.serialize(samples[0])), rel=1e-6)


def test_specforge_checkout_without_the_loader_is_refused(fake_specforge):
    (fake_specforge / "specforge" / "data" / "preprocessing.py").write_text(
        "def list_local_files(p): return []\n"
    )
    with pytest.raises(ImportError, match="OfflineEagle3Dataset"):
        st.load_specforge(str(fake_specforge))
