"""The dump contract shared by both server backends (reference, patched SGLang) and the
extractor. Stdlib only.

A request asks for a dump with ``sampling_params.custom_params``:
``{"hsx_dump": true, "hsx_loss_mask": "<rle>"}`` and a ``rid`` matching ``RID_RE``.
The server writes, on the output filesystem, in the dump directory it was started with:

* ``<dump_dir>/<rid>.dump`` — the complete sample in the output format (torch.save dict:
  input_ids, loss_mask, hidden_state [1,seq,H], aux_hidden_state [1,seq,3H]), fsynced;
* then ``<dump_dir>/<rid>.json`` — a sidecar {rid, seq, bytes, checksum, hidden_size, dtype,
  writer}, written atomically after the data file, so its presence means the data file is
  complete; ``writer`` names the process that wrote it (``TP0 pid 1234``), which the manifest
  keeps: with several scheduler processes it shows that one rank wrote each sample;
* or, when the dump cannot be written, ``<dump_dir>/<rid>.failed`` with the reason.

The response carries metadata only and may come before the files: the patched SGLang writes
on threads off its scheduler loop, so the extractor waits for the sidecar (or the failure
note). The extractor renames the data file into its shard and deletes the sidecar.
"""

from __future__ import annotations

import json
import os
import re

from .errors import HsxError

RID_RE = re.compile(r"[A-Za-z0-9._-]{1,128}\Z")  # whole (fullmatch; \Z: no trailing newline)
DUMP_DIR_ENV = "HSX_DUMP_DIR"
DUMP_LAYERS_ENV = "HSX_AUX_LAYER_IDS"  # comma-separated layer ids, same convention as SpecForge
DUMP_DTYPE_ENV = "HSX_DUMP_DTYPE"  # the files' float dtype ([job] dtype); unset: the model's own
FILE_DTYPES = ("bfloat16", "float16", "float32")
# [job] storage -> the committed file's suffix. "ckpt.gz" is standard gzip of the same torch.save
# bytes, which SpecForge's reader discovers and loads as it does ".ckpt" (decompressing in memory).
STORAGE = {"ckpt": ".ckpt", "ckpt.gz": ".ckpt.gz"}
DUMP_STORAGE_ENV = "HSX_DUMP_STORAGE"  # the server writes its dumps in this mode
# [job] mantissa_bits: bf16 hidden states rounded to this many mantissa bits (7: exact, unrounded)
DUMP_MANTISSA_ENV = "HSX_DUMP_MANTISSA_BITS"
BF16_MANTISSA_BITS = 7
CUSTOM_KEY = "hsx_dump"
MASK_KEY = "hsx_loss_mask"
CHECKSUM_ALGO = "xxh3_64"
# Not ".ckpt": SpecForge trains on every *.ckpt under the output directory, hidden ones too.
DATA_SUFFIX = ".dump"


class DumpError(HsxError, ValueError):
    """A dump request or sidecar that breaks the contract."""


def file_dtype() -> str | None:
    """The dtype the server's process was told to write, from the environment."""
    name = os.environ.get(DUMP_DTYPE_ENV) or None
    if name is not None and name not in FILE_DTYPES:
        raise DumpError(f"{DUMP_DTYPE_ENV}={name!r}: want one of {', '.join(FILE_DTYPES)}")
    return name


def file_storage() -> str:
    """The storage mode the server's process was told to write, from the environment."""
    name = os.environ.get(DUMP_STORAGE_ENV) or "ckpt"
    if name not in STORAGE:
        raise DumpError(f"{DUMP_STORAGE_ENV}={name!r}: want one of {', '.join(STORAGE)}")
    return name


def file_mantissa_bits() -> int:
    """The mantissa bits the server's process was told to keep, from the environment."""
    text = os.environ.get(DUMP_MANTISSA_ENV) or str(BF16_MANTISSA_BITS)
    if not _ascii_digits(text) or not 0 <= int(text) <= BF16_MANTISSA_BITS:
        raise DumpError(f"{DUMP_MANTISSA_ENV}={text!r}: want 0..{BF16_MANTISSA_BITS}")
    return int(text)


def _ascii_digits(text: str) -> bool:
    """str.isdigit() is true of "\u00b2" and "\u0663" too, which int() refuses or reads as 3."""
    return text.isascii() and text.isdigit()


def check_rid(rid: object) -> str:
    if not isinstance(rid, str) or not RID_RE.fullmatch(rid):
        raise DumpError(f"rid must match {RID_RE.pattern}, got {rid!r}")
    return rid


def encode_mask(mask: list[int]) -> str:
    """Run-length encode a 0/1 mask as 'v:n,v:n' (assistant spans are a few runs long)."""
    if not mask:
        return ""
    runs, cur, n = [], mask[0], 0
    for v in mask:
        if v == cur:
            n += 1
        else:
            runs.append(f"{cur}:{n}")
            cur, n = v, 1
    runs.append(f"{cur}:{n}")
    return ",".join(runs)


def decode_mask(text: str, length: int) -> list[int]:
    out: list[int] = []
    if text:
        for part in text.split(","):
            v, _, n = part.partition(":")
            if v not in ("0", "1") or not _ascii_digits(n):
                raise DumpError(f"bad loss-mask run {part!r}")
            out.extend([int(v)] * int(n))
    if len(out) != length:
        raise DumpError(f"loss mask has {len(out)} entries for {length} tokens")
    return out


def data_path(dump_dir: str, rid: str) -> str:
    return os.path.join(dump_dir, f"{check_rid(rid)}{DATA_SUFFIX}")


def sidecar_path(dump_dir: str, rid: str) -> str:
    return os.path.join(dump_dir, f"{check_rid(rid)}.json")


def write_sidecar(dump_dir: str, rid: str, meta: dict) -> None:
    path = sidecar_path(dump_dir, rid)
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"rid": rid, **meta}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def failure_path(dump_dir: str, rid: str) -> str:
    return os.path.join(dump_dir, f"{check_rid(rid)}.failed")


def write_failure(dump_dir: str, rid: str, reason: str) -> None:
    """Say at once why no dump will come, so the extractor need not wait for it."""
    path = failure_path(dump_dir, rid)
    with open(path + ".part", "w", encoding="utf-8") as f:
        f.write(reason[:2000])
    os.replace(path + ".part", path)


def remove_dump(dump_dir: str, rid: str) -> None:
    """A dump that will not be committed: its data file, sidecar and failure note, if any."""
    for path in (data_path(dump_dir, rid), sidecar_path(dump_dir, rid), failure_path(dump_dir, rid)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def poll_dump(dump_dir: str, rid: str) -> dict | None:
    """The sidecar once written, None while the dump is still being written; DumpError if the
    server gave up on it (with its reason) or the sidecar is unreadable."""
    try:
        with open(failure_path(dump_dir, rid), encoding="utf-8") as f:
            raise DumpError(f"server could not dump {rid}: {f.read()}")
    except FileNotFoundError:
        pass
    if not os.path.exists(sidecar_path(dump_dir, rid)):
        return None
    return read_sidecar(dump_dir, rid)


async def await_dump(dump_dir: str, rid: str, wait_s: float, alive=lambda: True) -> dict:
    """After the answer: the sidecar once it is written (the patched SGLang writes off its
    scheduler loop, so it may come later). DumpError with the reason if the server gave up on
    the dump, died, or wrote nothing within ``wait_s``."""
    import asyncio
    import time

    deadline = time.monotonic() + wait_s
    pause = 0.005
    while True:
        meta = poll_dump(dump_dir, rid)
        if meta is not None:
            return meta
        if not alive():
            raise DumpError(f"server exited before writing the dump of {rid}")
        if time.monotonic() > deadline:
            raise DumpError(f"server answered but wrote no dump for {rid} within {wait_s:g}s")
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.2)


def read_sidecar(dump_dir: str, rid: str) -> dict:
    path = sidecar_path(dump_dir, rid)
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise DumpError(f"server wrote no dump for {rid} ({path} missing)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise DumpError(f"unreadable dump sidecar {path}: {e}") from None
    for k in ("seq", "bytes", "checksum"):
        if k not in meta:
            raise DumpError(f"dump sidecar {path} lacks {k!r}")
    return meta


def request_body(rid: str, input_ids: list[int], loss_mask: list[int]) -> dict:
    """The /generate body both backends accept (SGLang's schema: see patches/)."""
    return {
        "rid": check_rid(rid),
        "input_ids": input_ids,
        "return_hidden_states": True,
        "sampling_params": {
            "max_new_tokens": 1,
            "temperature": 0.0,
            "custom_params": {CUSTOM_KEY: True, MASK_KEY: encode_mask(loss_mask)},
        },
    }
