"""Record-batch compression codecs (attributes bits 0-2).

Only the cleaner, control batches, the null-key check of compacted topics and tests
decompress: the Produce and Fetch paths otherwise store and serve compressed batches exactly
as the producer wrote them. Decompression is bounded (`max_size`, checked while inflating) so
that a compression bomb cannot exhaust memory.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam

from yak.errors import CorruptRecordError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Java clients frame snappy the xerial way (SnappyOutputStream); librdkafka reads both.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024

DEFAULT_MAX_SIZE = 256 * 1024 * 1024


def compress(codec: int, data: bytes | memoryview) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        out = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
        mv = memoryview(data)
        for i in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(mv[i : i + _XERIAL_BLOCK]))
            out.append(struct.pack(">i", len(block)))
            out.append(block)
        return b"".join(out)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Decompress, refusing output larger than `max_size` (CorruptRecordError)."""
    try:
        if codec == NONE:
            out = bytes(data)
        elif codec == GZIP:
            d = zlib.decompressobj(47)
            out = d.decompress(data, max_size + 1)
        elif codec == SNAPPY:
            out = _snappy_decompress(bytes(data), max_size)
        elif codec == LZ4:
            out = _bounded(cramjam.lz4.decompress_into, data, max_size)
        elif codec == ZSTD:
            out = _bounded(cramjam.zstd.decompress_into, data, max_size)
        else:
            raise CorruptRecordError(f"unknown compression codec {codec}")
    except CorruptRecordError:
        raise
    except Exception as e:  # codec libraries raise their own types
        raise CorruptRecordError(f"cannot decompress {CODEC_NAMES.get(codec)}: {e}") from e
    if len(out) > max_size:
        raise CorruptRecordError(f"decompressed batch exceeds {max_size} bytes")
    return out


def _bounded(
    decompress_into: Callable[[bytes | memoryview, bytearray], int],
    data: bytes | memoryview,
    max_size: int,
) -> bytes:
    """lz4/zstd into a buffer that grows (x8) up to `max_size` + 1 bytes: a bomb (zstd
    turns 6 KB into 200 MB) fails when the buffer is full instead of being inflated whole."""
    size = min(max_size + 1, max(64 * 1024, 8 * len(data)))
    while True:
        buf = bytearray(size)
        try:
            n = decompress_into(data, buf)
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):  # corrupt input, not a full buffer
                raise
            if size > max_size:
                raise CorruptRecordError(f"decompressed batch exceeds {max_size} bytes") from None
            size = min(max_size + 1, size * 8)
            continue
        return bytes(memoryview(buf)[:n])


def _snappy_decompress(data: bytes, max_size: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        if cramjam.snappy.decompress_raw_len(data) > max_size:
            raise CorruptRecordError(f"decompressed batch exceeds {max_size} bytes")
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = _XERIAL_HEADER.size
    out: list[bytes] = []
    total = 0
    while pos < len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        block = data[pos : pos + n]
        pos += n
        total += cramjam.snappy.decompress_raw_len(block)
        if total > max_size:
            raise CorruptRecordError(f"decompressed batch exceeds {max_size} bytes")
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
    return b"".join(out)
