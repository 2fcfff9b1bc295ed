import os
import shutil
import threading

import pytest
import torch
import xxhash

from runner.codec import ckpt, sink
from runner.codec.ckpt import BadSample, CorruptSample, load_sample, write_sample
from runner.codec.sink import file_checksum
from runner.contract.errors import HsxError

SEQ, H = 37, 16


def make(seq=SEQ, hidden=H, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 32000, (seq,), generator=g),
        "loss_mask": (torch.arange(seq) >= seq // 3).to(torch.int64),
        "hidden_state": torch.randn(1, seq, hidden, generator=g).to(dtype),
        "aux_hidden_state": torch.randn(1, seq, 3 * hidden, generator=g).to(dtype),
    }


def crc_setting():
    from torch.utils.serialization import config

    return config.save.compute_crc32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("mmap", [False, True])
def test_roundtrip(tmp_path, dtype, mmap):
    sample = make(dtype=dtype)
    path = tmp_path / "data_0.ckpt"
    nbytes, checksum = write_sample(path, **sample)
    assert nbytes == path.stat().st_size
    assert checksum == file_checksum(path) == xxhash.xxh3_64(path.read_bytes()).hexdigest()

    loaded = load_sample(path, mmap=mmap)
    assert set(loaded) == set(ckpt.KEYS)
    for k, v in sample.items():
        assert loaded[k].dtype == v.dtype, k
        assert loaded[k].shape == v.shape, k
        assert torch.equal(loaded[k], v), k
    assert loaded["input_ids"].dtype == torch.int64 and loaded["loss_mask"].dtype == torch.int64


def test_plain_torch_load_reads_it_like_specforge(tmp_path):
    sample = make()
    path = tmp_path / "data_1.ckpt"
    write_sample(path, **sample)
    for mmap in (False, True):
        data = torch.load(str(path), weights_only=True, mmap=mmap)
        assert torch.equal(data["aux_hidden_state"], sample["aux_hidden_state"])
        # SpecForge edits the loaded mask in place; a private mmap must allow that
        data["loss_mask"][-1] = 0
    assert torch.equal(torch.load(str(path), weights_only=True)["loss_mask"], sample["loss_mask"])


def test_views_and_non_contiguous_inputs_are_written_compactly(tmp_path):
    ref = make()
    batch = torch.zeros(4, 2 * SEQ, H, dtype=torch.bfloat16)
    batch[2, :SEQ] = ref["hidden_state"][0]
    hidden_view = batch[2:3, :SEQ]  # a view into a 4x larger buffer
    aux_t = ref["aux_hidden_state"].transpose(1, 2).contiguous().transpose(1, 2)  # non-contiguous
    assert not aux_t.is_contiguous()
    ids = torch.stack([ref["input_ids"], ref["input_ids"]], dim=1)[:, 0]  # strided view
    mask = ref["loss_mask"].to(torch.bool)

    path_view = tmp_path / "view.ckpt"
    path_ref = tmp_path / "ref.ckpt"
    n_view, _ = write_sample(
        path_view, input_ids=ids, loss_mask=mask, hidden_state=hidden_view, aux_hidden_state=aux_t
    )
    n_ref, _ = write_sample(path_ref, **ref)
    assert abs(n_view - n_ref) < 256  # same payload; only archive names differ, not a dragged-in buffer
    loaded = load_sample(path_view)
    for k, v in ref.items():
        assert torch.equal(loaded[k], v), k
    assert loaded["loss_mask"].dtype == torch.int64


def test_int32_ids_are_stored_as_int64(tmp_path):
    sample = make()
    sample["input_ids"] = sample["input_ids"].to(torch.int32)
    sample["loss_mask"] = sample["loss_mask"].to(torch.int32)
    write_sample(tmp_path / "a.ckpt", **sample)
    loaded = load_sample(tmp_path / "a.ckpt")
    assert loaded["input_ids"].dtype == torch.int64 and loaded["loss_mask"].dtype == torch.int64


def test_checksum_is_of_the_bytes_written_and_changes_with_them(tmp_path):
    a, b = make(seed=1), make(seed=2)
    _, ca = write_sample(tmp_path / "a.ckpt", **a)
    _, cb = write_sample(tmp_path / "b.ckpt", **b)
    assert ca != cb
    assert len(ca) == 16 and int(ca, 16) >= 0
    raw = bytearray((tmp_path / "a.ckpt").read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # a flipped bit inside tensor data
    (tmp_path / "a.ckpt").write_bytes(raw)
    assert file_checksum(tmp_path / "a.ckpt") != ca


def test_large_sample_spans_many_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(sink, "CHUNK_BYTES", 4096)  # many chunks and writeback hints on a small file
    hints = []
    real = sink._sync_file_range
    if real is not None:

        def counting(fd, offset, length, flags):
            hints.append((offset, length))
            return real(fd, offset, length, flags)

        monkeypatch.setattr(sink, "_sync_file_range", counting)
    sample = make(seq=600, hidden=64)
    nbytes, checksum = write_sample(tmp_path / "big.ckpt", **sample)
    assert nbytes > 50 * 4096
    if real is not None:  # Linux: writeback was started chunk by chunk, in order, without gaps
        assert len(hints) >= 50
        assert all(a[0] + a[1] == b[0] for a, b in zip(hints, hints[1:], strict=False))
    assert checksum == file_checksum(tmp_path / "big.ckpt")
    assert torch.equal(load_sample(tmp_path / "big.ckpt")["hidden_state"], sample["hidden_state"])


def test_existing_temp_file_is_truncated(tmp_path):
    path = tmp_path / "t.ckpt"
    path.write_bytes(b"x" * 10_000_000)
    nbytes, checksum = write_sample(path, **make())
    assert path.stat().st_size == nbytes < 10_000_000
    assert file_checksum(path) == checksum


@pytest.mark.parametrize("mmap", [False, True])
@pytest.mark.parametrize("cut", ["half", "tail", "empty"])
def test_truncated_file_is_corrupt(tmp_path, mmap, cut):
    path = tmp_path / "data_5.ckpt"
    write_sample(path, **make())
    raw = path.read_bytes()
    path.write_bytes({"half": raw[: len(raw) // 2], "tail": raw[:-20], "empty": b""}[cut])
    with pytest.raises(CorruptSample) as err:
        load_sample(path, mmap=mmap)
    assert err.value.path == str(path)
    assert str(path) in str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, HsxError)


@pytest.mark.parametrize("mmap", [False, True])
def test_garbage_file_is_corrupt(tmp_path, mmap):
    path = tmp_path / "data_6.ckpt"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(CorruptSample, match="data_6.ckpt"):
        load_sample(path, mmap=mmap)


def test_wrong_content_is_corrupt(tmp_path):
    path = tmp_path / "data_7.ckpt"
    torch.save({"input_ids": torch.arange(5)}, path)
    with pytest.raises(CorruptSample, match="lacks"):
        load_sample(path)
    bad = make()
    bad["aux_hidden_state"] = bad["aux_hidden_state"][:, :, :H]
    torch.save(bad, path)
    with pytest.raises(CorruptSample, match="3 x hidden size"):
        load_sample(path)
    torch.save([1, 2], path)
    with pytest.raises(CorruptSample, match="not a dict"):
        load_sample(path)


def test_missing_file_is_not_corrupt(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_sample(tmp_path / "nope.ckpt")


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.update(hidden_state=s["hidden_state"][0]), r"hidden_state must be \[1, seq, width\]"),
        (lambda s: s.update(hidden_state=s["hidden_state"].expand(2, -1, -1)), r"must be \[1, seq, width\]"),
        (lambda s: s.update(aux_hidden_state=s["aux_hidden_state"][:, :, :-1]), "not 3 x hidden size 16"),
        (lambda s: s.update(input_ids=s["input_ids"][:-1]), "sequence lengths differ"),
        (lambda s: s.update(aux_hidden_state=s["aux_hidden_state"][:, 1:]), "sequence lengths differ"),
        (lambda s: s.update(input_ids=s["input_ids"][None]), r"input_ids must be 1-D"),
        (lambda s: s.update(input_ids=s["input_ids"].float()), "input_ids must be an integer tensor"),
        (lambda s: s.update(loss_mask=s["loss_mask"] * 2), "only 0 and 1"),
        (lambda s: s.update(hidden_state=s["hidden_state"].float()), "hidden_state is torch.float32"),
        (lambda s: s.update(hidden_state=[1, 2]), "must be a torch.Tensor"),
        (lambda s: s.update(hidden_state=s["hidden_state"].to(torch.int64)), "floating point"),
        (lambda s: s.update({k: v[..., :0, :] if v.dim() == 3 else v[:0] for k, v in s.items()}), "empty"),
    ],
)
def test_bad_inputs_are_refused_and_write_nothing(tmp_path, change, message):
    sample = make()
    change(sample)
    path = tmp_path / "x.ckpt"
    with pytest.raises(BadSample, match=message):
        write_sample(path, **sample)
    assert not path.exists()


def test_failed_write_removes_partial_file_and_restores_crc(tmp_path, monkeypatch):
    before = crc_setting()
    path = tmp_path / "x.ckpt"

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.os, "fdatasync", boom)
    with pytest.raises(OSError, match="No space"):
        write_sample(path, **make())
    assert not path.exists()
    assert crc_setting() is before


@pytest.mark.parametrize("initial", [True, False])
def test_torch_save_config_is_unchanged_after_write(tmp_path, initial):
    from torch.utils.serialization import config

    old = config.save.compute_crc32
    config.save.compute_crc32 = initial
    try:
        write_sample(tmp_path / "a.ckpt", **make())
        assert config.save.compute_crc32 is initial
    finally:
        config.save.compute_crc32 = old
    # and a plain torch.save afterwards still writes real CRCs (checked by Python's zipfile)
    import zipfile

    torch.save({"x": torch.arange(10)}, tmp_path / "plain.pt")
    with zipfile.ZipFile(tmp_path / "plain.pt") as z:
        assert z.testzip() is None


def test_concurrent_writes_share_one_crc_window(tmp_path):
    before = crc_setting()
    errors, sums = [], {}

    def work(i):
        try:
            for j in range(3):
                p = tmp_path / f"w{i}_{j}.ckpt"
                _, c = write_sample(p, **make(seed=i * 10 + j))
                sums[p] = c
        except Exception as e:  # surfaced by the assert below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert crc_setting() is before
    for p, c in sums.items():
        assert file_checksum(p) == c
        load_sample(p)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_all_finite_on_the_bits_agrees_with_isfinite(dtype):
    from runner.codec.ckpt import all_finite

    x = torch.randn(3, 50, 8).to(dtype)
    assert all_finite(x)
    x[1, 7, 3] = float(torch.finfo(dtype).max)  # the largest finite value is still finite
    x[0, 0, 0] = -0.0
    assert all_finite(x) and all_finite(x[:, ::2])  # a strided view too
    for bad in (float("nan"), float("inf"), float("-inf")):
        y = x.clone()
        y[2, 49, 7] = bad
        assert not all_finite(y) and not bool(torch.isfinite(y).all()), bad


def test_ckpt_gz_is_standard_gzip_of_the_same_bytes_and_loads_like_specforge(tmp_path):
    """[job] storage = "ckpt.gz": what SpecForge's reader does with it (gzip.open, then
    torch.load of the bytes) gives the same tensors; the checksum is of the file as stored."""
    import gzip
    import io

    sample = make()
    raw, gz = tmp_path / "data_0.ckpt", tmp_path / "data_0.ckpt.gz"
    write_sample(raw, **sample)
    nbytes, checksum = write_sample(gz, **sample, compress=True)
    assert nbytes == gz.stat().st_size < raw.stat().st_size
    assert checksum == file_checksum(gz) != file_checksum(raw)
    with gzip.open(gz, "rb") as f:  # SpecForge's OfflineEagle3Dataset._open_file
        data = f.read()
    assert data == raw.read_bytes()  # the same torch.save bytes, only gzipped
    as_specforge = torch.load(io.BytesIO(data), weights_only=True)
    for name in (gz, tmp_path / "named-otherwise.dump"):  # detected by content, not by name
        if name != gz:
            shutil.copy(gz, name)
        loaded = load_sample(name)
        assert all(
            torch.equal(loaded[k], sample[k]) and torch.equal(as_specforge[k], sample[k]) for k in sample
        )
    assert ckpt.is_gzip(gz) and not ckpt.is_gzip(raw)


def test_a_torn_ckpt_gz_is_corrupt_not_a_crash(tmp_path):
    gz = tmp_path / "data_0.ckpt.gz"
    write_sample(gz, **make(), compress=True)
    os.truncate(gz, gz.stat().st_size // 2)
    with pytest.raises(CorruptSample, match="cannot load"):
        load_sample(gz)


def test_fewer_mantissa_bits_are_written_rounded_and_checked(tmp_path):
    from runner.codec.precision import round_mantissa

    sample = make()
    path = tmp_path / "data_0.ckpt"
    write_sample(path, **sample, mantissa_bits=3)
    loaded = load_sample(path)
    for k in ("hidden_state", "aux_hidden_state"):
        assert torch.equal(loaded[k], round_mantissa(sample[k], 3)) and not torch.equal(loaded[k], sample[k])
    assert torch.equal(loaded["input_ids"], sample["input_ids"])
    assert ckpt.check_tensors(loaded, H, "bfloat16", mantissa_bits=3) is None
    assert ckpt.check_tensors(loaded, H, "bfloat16", mantissa_bits=2).startswith("hidden_state holds more")
    assert ckpt.check_tensors(sample, H, "bfloat16", mantissa_bits=3).startswith("hidden_state holds more")


def test_the_sample_size_bound_holds_a_real_sample_of_that_length(tmp_path):
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float32, "float32")):
        path = tmp_path / f"{name}.ckpt"
        nbytes, _ = write_sample(path, **make(seq=SEQ, dtype=dtype))
        bound = ckpt.max_sample_bytes(SEQ, H, name)
        assert nbytes <= bound < nbytes + (2 << 20)


def test_a_gzip_bomb_is_corrupt_past_the_bound_without_inflating_it(tmp_path):
    import resource
    import zlib

    path = tmp_path / "data_0.ckpt.gz"
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(64 << 20)
    with open(path, "wb") as f:
        for _ in range(8):  # 512 MiB of zeros in about half a megabyte
            f.write(z.compress(block))
        f.write(z.flush())
    del block
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with pytest.raises(CorruptSample, match="more than"):
        load_sample(path, max_bytes=ckpt.max_sample_bytes(SEQ, H, "bfloat16"))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 << 10  # < 100 MiB more
    good = tmp_path / "good.ckpt.gz"
    write_sample(good, **make(), compress=True)
    assert load_sample(good, max_bytes=ckpt.max_sample_bytes(SEQ, H, "bfloat16"))["input_ids"].shape == (SEQ,)
