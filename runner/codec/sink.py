"""The bytes of a sample file, below torch: a sink that writes in chunks, hashes each one
and starts its writeback at once; gzip on the way ([job] storage "ckpt.gz"); the checksum of a
file as stored; and ``recode``, which turns one stored form into the other without torch
(``hsx-runner compact``), proving the result holds the same bytes as the source."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import zlib
from collections.abc import Iterator

import xxhash

from ..contract.dump import CHECKSUM_ALGO

CHUNK_BYTES = 4 << 20  # write/hash/writeback unit; 4 MiB measured best (16/64 MiB start writeback later)
_READ_CHUNK = 8 << 20
_HASHERS = {"xxh3_64": xxhash.xxh3_64}
new_hasher = _HASHERS[CHECKSUM_ALGO]


_SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()


class HashingSink:
    """File-like target for torch.save: writes to fd in chunks, hashes each chunk, and starts
    writeback behind itself. Hashing in a second thread instead measured no faster."""

    def __init__(self, fd: int):
        self.fd = fd
        self.hasher = new_hasher()
        self.written = 0
        self._flushed_to = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        pos = 0
        while pos < total:
            part = view[pos : pos + CHUNK_BYTES]
            self.hasher.update(part)
            done = 0
            while done < len(part):  # os.write may write less than asked
                done += os.write(self.fd, part[done:])
            pos += done
            self.written += done
            if _sync_file_range is not None and self.written - self._flushed_to >= CHUNK_BYTES:
                # only a hint to start writeback now; durability comes from the fsync at the end
                _sync_file_range(
                    self.fd, self._flushed_to, self.written - self._flushed_to, _SYNC_FILE_RANGE_WRITE
                )
                self._flushed_to = self.written
        return total

    def flush(self) -> None:
        pass


GZIP_MAGIC = b"\x1f\x8b"


def gzip_codec():
    """ISA-L's gzip (standard gzip output, ~8x zlib's speed per core), else zlib's."""
    try:
        from isal import isal_zlib

        return isal_zlib
    except ImportError:  # slower, same format
        return zlib


class GzipSink:
    """torch.save's bytes gzipped on the way into the hashing sink: the checksum and the byte
    count are of the file as stored, and nothing is held in memory but one chunk."""

    def __init__(self, inner: HashingSink):
        self.inner = inner
        self.z = gzip_codec().compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        for pos in range(0, len(view), CHUNK_BYTES):
            out = self.z.compress(view[pos : pos + CHUNK_BYTES])
            if out:
                self.inner.write(out)
        return len(view)

    def flush(self) -> None:
        pass

    def finish(self) -> None:
        self.inner.write(self.z.flush())


def file_checksum(path: str | os.PathLike) -> str:
    """The write_sample checksum, recomputed by streaming the file."""
    hasher = new_hasher()
    buf = bytearray(_READ_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            hasher.update(view[:n])
    return hasher.hexdigest()


def is_gzip(path: str | os.PathLike) -> bool:
    """By its first bytes, not its name: a dump in the server's temp dir is ``<rid>.dump``."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


@contextlib.contextmanager
def new_file(path: str | os.PathLike) -> Iterator[HashingSink]:
    """``path`` created (a leftover truncated), written through the sink yielded, and fdatasync'ed
    at the end; on any error it is removed: a complete, synced file or none."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        yield HashingSink(fd)
        (os.fdatasync if hasattr(os, "fdatasync") else os.fsync)(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


def recode(src: str | os.PathLike, dst: str | os.PathLike, compress: bool) -> tuple[str, int, str]:
    """Write ``dst`` (created, fsynced) as the other stored form of ``src``: gzip of its bytes
    when ``compress``, else its bytes ungzipped. Returns (checksum of src as stored, bytes of
    dst, checksum of dst). The caller compares the first with the manifest's; here the new file
    is read back and its plain bytes hashed against the source's, so a returned dst is proven to
    hold the same sample. Raises ValueError when it does not (dst removed), OSError as the disk does."""
    src_hash, plain = new_hasher(), new_hasher()
    codec = gzip_codec()
    with new_file(dst) as sink:
        z = codec.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS) if compress else None
        unz = None if compress else codec.decompressobj(16 + zlib.MAX_WBITS)
        with open(src, "rb", buffering=0) as f:
            while chunk := f.read(_READ_CHUNK):
                src_hash.update(chunk)
                if compress:
                    plain.update(chunk)
                    out = z.compress(chunk)
                else:
                    out = unz.decompress(chunk)
                    plain.update(out)
                if out:
                    sink.write(out)
        if compress:
            sink.write(z.flush())
        elif not unz.eof:
            raise ValueError(f"{src}: the gzip stream ends early")
    if plain_checksum(dst) != plain.hexdigest():
        os.unlink(dst)
        raise ValueError(f"{dst}: reads back different from {src}")
    return src_hash.hexdigest(), sink.written, sink.hasher.hexdigest()


def plain_checksum(path: str | os.PathLike) -> str:
    """The checksum of a file's bytes before any gzip: a ``.ckpt.gz`` and the ``.ckpt`` it was
    made from agree."""
    if not is_gzip(path):
        return file_checksum(path)
    hasher, unz = new_hasher(), gzip_codec().decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_READ_CHUNK):
            hasher.update(unz.decompress(chunk))
    if not unz.eof:
        raise ValueError(f"{path}: the gzip stream ends early")
    return hasher.hexdigest()
