"""One hidden-state sample on disk: the SpecForge `.ckpt` file (a torch.save dict), or the same
bytes gzipped (`.ckpt.gz`, [job] storage), which SpecForge's reader also loads.

Layout: ``input_ids`` int64 [seq], ``loss_mask`` int64 [seq] (SpecForge builds its masks as
``torch.long``), ``hidden_state`` [1, seq, H], ``aux_hidden_state`` [1, seq, 3H], model dtype.

Why ``write_sample`` is fast (measured with ``python -m bench.write_path``):
* torch.save's zip writer CRC32s every byte on one core, which halves its throughput before
  the disk is involved. The CRC is switched off for our saves only: torch.load never checks it,
  and the file's integrity is our own xxh3 checksum (~25 GB/s, about a tenth of the write).
* a buffered write followed by one fsync leaves the whole writeback for the end. Bytes go
  straight from the tensors' memory (torch hands each storage over as one memoryview) to the
  file in 4 MiB chunks, hashed on the way, and each chunk's writeback is started at once
  (sync_file_range), so the final fsync only waits for the tail.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import zlib

import torch

from ..contract.dump import BF16_MANTISSA_BITS
from ..contract.errors import HsxError
from .precision import round_mantissa
from .sink import GzipSink, gzip_codec, is_gzip, new_file

KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")
AUX_LAYERS = 3


class BadSample(HsxError, ValueError):
    """Tensors handed to write_sample that do not form a valid sample."""


class CorruptSample(HsxError, ValueError):
    """A sample file that cannot be loaded or does not hold a valid sample."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"corrupt sample {self.path}: {reason}")


def _check_layout(input_ids, loss_mask, hidden_state, aux_hidden_state) -> tuple[int, int]:
    """Shapes and kinds shared by writing and loading; returns (seq, hidden size)."""
    for name, t in zip(KEYS, (input_ids, loss_mask, hidden_state, aux_hidden_state), strict=True):
        if not isinstance(t, torch.Tensor):
            raise BadSample(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise BadSample(f"{name} must be on the CPU, got {t.device}")
    for name, t in (("input_ids", input_ids), ("loss_mask", loss_mask)):
        if t.dim() != 1:
            raise BadSample(f"{name} must be 1-D [seq], got shape {list(t.shape)}")
        if t.is_floating_point() or t.is_complex():
            raise BadSample(f"{name} must be an integer tensor, got {t.dtype}")
    for name, t in (("hidden_state", hidden_state), ("aux_hidden_state", aux_hidden_state)):
        if t.dim() != 3 or t.shape[0] != 1:
            raise BadSample(f"{name} must be [1, seq, width], got shape {list(t.shape)}")
        if not t.is_floating_point():
            raise BadSample(f"{name} must be floating point, got {t.dtype}")
    if hidden_state.dtype != aux_hidden_state.dtype:
        raise BadSample(
            f"hidden_state is {hidden_state.dtype} but aux_hidden_state is {aux_hidden_state.dtype}"
        )
    seq, hidden = hidden_state.shape[1], hidden_state.shape[2]
    seqs = {
        "input_ids": input_ids.shape[0],
        "loss_mask": loss_mask.shape[0],
        "hidden_state": seq,
        "aux_hidden_state": aux_hidden_state.shape[1],
    }
    if len(set(seqs.values())) != 1:
        raise BadSample(f"sequence lengths differ: {seqs}")
    if seq == 0 or hidden == 0:
        raise BadSample(f"empty sample: seq {seq}, hidden size {hidden}")
    if aux_hidden_state.shape[2] != AUX_LAYERS * hidden:
        raise BadSample(
            f"aux_hidden_state width {aux_hidden_state.shape[2]} is not {AUX_LAYERS} x hidden size {hidden}"
        )
    return seq, hidden


def _compact(t: torch.Tensor) -> torch.Tensor:
    """torch.save writes a tensor's whole storage: a view into a larger buffer (a slice of a
    padded batch) would drag the rest of the buffer into the file."""
    t = t.detach()
    if not t.is_contiguous() or t.storage_offset() != 0 or t.untyped_storage().nbytes() != t.nbytes:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _sample_dict(input_ids, loss_mask, hidden_state, aux_hidden_state) -> dict[str, torch.Tensor]:
    _check_layout(input_ids, loss_mask, hidden_state, aux_hidden_state)
    if loss_mask.dtype != torch.bool and bool(((loss_mask != 0) & (loss_mask != 1)).any()):
        raise BadSample("loss_mask must hold only 0 and 1")
    return {
        "input_ids": _compact(input_ids.to(torch.int64)),
        "loss_mask": _compact(loss_mask.to(torch.int64)),
        "hidden_state": _compact(hidden_state),
        "aux_hidden_state": _compact(aux_hidden_state),
    }


# --- torch's zip CRC, off only while our own saves run ---------------------------------------
# The switch is process-wide, so concurrent write_sample calls share one window (a count under a
# lock) and the caller's setting comes back when the last one ends. A torch.save elsewhere that
# runs inside the window also skips the CRC; torch.load does not check it, so its file still loads.

_crc_lock = threading.Lock()
_crc_users = 0
_crc_saved: bool | None = None


def _save_config():
    try:
        from torch.utils.serialization import config
    except ImportError:  # torch < 2.6: no switch, the CRC stays on (slower, still correct)
        return None
    return config.save if hasattr(config.save, "compute_crc32") else None


@contextlib.contextmanager
def _zip_crc_off():
    global _crc_users, _crc_saved
    cfg = _save_config()
    if cfg is None:
        yield
        return
    with _crc_lock:
        if _crc_users == 0:
            _crc_saved = cfg.compute_crc32
            cfg.compute_crc32 = False
        _crc_users += 1
    try:
        yield
    finally:
        with _crc_lock:
            _crc_users -= 1
            if _crc_users == 0:
                cfg.compute_crc32 = _crc_saved


def write_sample(
    path: str | os.PathLike,
    *,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    hidden_state: torch.Tensor,
    aux_hidden_state: torch.Tensor,
    dtype: str | None = None,
    compress: bool = False,
    mantissa_bits: int = 7,
) -> tuple[int, str]:
    """Create `path` (truncating a leftover), write the sample, fsync it; ``dtype`` names the
    float dtype the hidden states are stored in (None: as given); ``compress``: gzip the bytes
    (the "ckpt.gz" storage mode); ``mantissa_bits`` < 7: bf16 hidden states rounded to nearest
    even to that many mantissa bits first (lossy, still bf16: SpecForge reads it as is).

    Returns (bytes written, checksum hex of those exact bytes). The caller renames the file
    into place and fsyncs the directory. On any error the partial file is removed.
    """
    if dtype is not None:  # SpecForge casts its head to bf16 and never casts a batch
        hidden_state, aux_hidden_state = (
            t.to(getattr(torch, dtype)) for t in (hidden_state, aux_hidden_state)
        )
    if mantissa_bits < BF16_MANTISSA_BITS:
        hidden_state, aux_hidden_state = (
            round_mantissa(t, mantissa_bits) for t in (hidden_state, aux_hidden_state)
        )
    sample = _sample_dict(input_ids, loss_mask, hidden_state, aux_hidden_state)
    with new_file(path) as sink:
        target = GzipSink(sink) if compress else sink
        with _zip_crc_off():
            torch.save(sample, target)
        if compress:
            target.finish()
    return sink.written, sink.hasher.hexdigest()


# Float formats by their bits: an exponent of all ones is inf or nan.
_EXPONENT = {
    torch.bfloat16: (torch.int16, 0x7F80),
    torch.float16: (torch.int16, 0x7C00),
    torch.float32: (torch.int32, 0x7F800000),
}


def all_finite(t: torch.Tensor) -> bool:
    """No inf or nan in ``t``. On the bits: several times faster than torch.isfinite on bf16,
    which sets verify's pace over terabytes."""
    if t.dtype not in _EXPONENT or t.numel() == 0:
        return bool(torch.isfinite(t).all())
    ints, mask = _EXPONENT[t.dtype]
    return int((t.contiguous().view(ints) & mask).max()) != mask


def check_tensors(
    t: dict,
    hidden: int,
    dtype: str | None,
    want_ids: list[int] | None = None,
    finite: bool = True,
    mantissa_bits: int = BF16_MANTISSA_BITS,
) -> str | None:
    """The one sample checker (verify, adopt, the self-test): what is wrong with a loaded
    sample for this job, or None. ``dtype`` is the job's file dtype ("bfloat16"); None skips it.
    ``mantissa_bits`` < 7: bf16 values must carry no more mantissa bits than that."""
    missing = [k for k in KEYS if k not in t]
    if missing:
        return f"missing keys {sorted(missing)}"
    ids, mask, hs, aux = (t[k] for k in KEYS)
    if ids.dtype != torch.int64 or ids.dim() != 1:
        return f"input_ids {ids.dtype} {tuple(ids.shape)}"
    seq = len(want_ids) if want_ids is not None else ids.shape[0]
    for name, x, width in (("hidden_state", hs, hidden), ("aux_hidden_state", aux, AUX_LAYERS * hidden)):
        if tuple(x.shape) != (1, seq, width):
            return f"{name} shape {tuple(x.shape)}, want (1, {seq}, {width})"
    if tuple(mask.shape) != (seq,):
        return f"loss_mask shape {tuple(mask.shape)}, want ({seq},)"
    want = getattr(torch, dtype, None) if dtype else None
    if want is not None and (hs.dtype != want or aux.dtype != want):
        return f"dtype {hs.dtype}/{aux.dtype}, want {want}"
    if want_ids is not None and ids.tolist() != want_ids:
        return "input_ids differ from the dataset's tokens"
    if finite and not (all_finite(hs) and all_finite(aux)):
        return "non-finite values"
    if mantissa_bits < BF16_MANTISSA_BITS and finite:
        low = (1 << (BF16_MANTISSA_BITS - mantissa_bits)) - 1
        for name, x in (("hidden_state", hs), ("aux_hidden_state", aux)):
            if x.dtype == torch.bfloat16 and bool((x.contiguous().view(torch.int16) & low).any()):
                return f"{name} holds more than {mantissa_bits} mantissa bits ([job] mantissa_bits)"
    return None


SLACK_BYTES = 1 << 20  # torch.save's zip headers and pickle, with room to spare


def max_sample_bytes(seq: int, hidden: int, dtype: str | None) -> int:
    """The most bytes a torch.save of a ``seq``-token sample can take: int64 ids and mask, the
    hidden state and its AUX_LAYERS-wide aux in ``dtype`` (None: the widest, 4 bytes)."""
    width = getattr(torch, dtype).itemsize if dtype else 4
    return seq * (2 * 8 + (1 + AUX_LAYERS) * hidden * width) + SLACK_BYTES


def output_bound(desc: dict, seq: int | None = None) -> int | None:
    """max_sample_bytes for an output's ``dataset.json`` (``hidden_size``, ``dtype``,
    ``max_length``): of ``seq`` tokens when known, else of ``max_length``; None without a size."""
    seq = seq if seq is not None else desc.get("max_length")
    if not isinstance(seq, int) or not isinstance(desc.get("hidden_size"), int):
        return None
    return max_sample_bytes(seq, desc["hidden_size"], desc.get("dtype"))


def _gunzip(path: str | os.PathLike, max_bytes: int | None) -> bytes:
    """The file's bytes ungzipped, never more than ``max_bytes`` of them in memory."""
    unz, out = gzip_codec().decompressobj(16 + zlib.MAX_WBITS), bytearray()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            left = 0 if max_bytes is None else max_bytes + 1 - len(out)  # 0: no bound
            out += unz.decompress(chunk, left)
            if max_bytes is not None and len(out) > max_bytes:
                raise CorruptSample(
                    path,
                    f"cannot load (it ungzips to more than the {max_bytes} bytes such a sample can hold)",
                )
    if not unz.eof:
        raise CorruptSample(path, "cannot load (the gzip stream ends early)")
    return bytes(out)


def load_sample(
    path: str | os.PathLike, *, mmap: bool = True, max_bytes: int | None = None
) -> dict[str, torch.Tensor]:
    """Load and check a sample; mmap (the default) maps the tensors instead of reading them.
    ``max_bytes`` (max_sample_bytes): a ``.ckpt.gz`` that ungzips to more is corrupt, found
    without inflating it (a gzip bomb).

    A missing file raises FileNotFoundError; a file that is there but cannot be loaded (or
    does not hold a sound sample) raises CorruptSample. Flipped bytes inside tensor data are not detected
    here (the zip carries no CRC): compare file_checksum with the manifest for that.
    """
    os.stat(path)  # a missing file is missing, not corrupt
    try:
        if is_gzip(path):  # "ckpt.gz": read whole and decompressed, as SpecForge does
            raw = _gunzip(path, max_bytes)
            data = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        else:
            data = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except CorruptSample:
        raise
    except Exception as e:  # torch raises many kinds (RuntimeError, OSError, EOFError, UnpicklingError, ...)
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise CorruptSample(path, f"cannot load ({type(e).__name__}: {first_line[:200]})") from e
    if not isinstance(data, dict):
        raise CorruptSample(path, f"holds a {type(data).__name__}, not a dict")
    missing = [k for k in KEYS if k not in data]
    if missing:
        raise CorruptSample(path, f"lacks {missing}")
    try:
        _check_layout(*(data[k] for k in KEYS))
    except BadSample as e:
        raise CorruptSample(path, str(e)) from None
    return data
