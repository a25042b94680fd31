"""Kafka's default partitioner (murmur2 of the key), vectorized over an Arrow key column.

Java clients, kafka-python and Spark's Kafka sink place a keyed record on
`(murmur2(key) & 0x7fffffff) % partitions`; the sink does the same so that records with one
key land where every other producer of that topic puts them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_M = np.uint32(0x5BD1E995)
_SEED = 0x9747B28C


def murmur2(keys: pa.Array) -> np.ndarray:
    """Kafka's murmur2 hash of each (non-null) key, as uint32."""
    if not pa.types.is_binary(keys.type):
        keys = keys.cast(pa.binary())
    keys = keys.fill_null(b"")
    n = len(keys)
    offs = np.frombuffer(keys.buffers()[1], np.int32, n + 1, keys.offset * 4).astype(np.int64)
    data = np.frombuffer(keys.buffers()[2] or b"", np.uint8)
    lens = np.diff(offs)
    maxlen = int(lens.max()) if n else 0
    width = (maxlen + 3) // 4 * 4
    idx = offs[:-1, None] + np.arange(width)[None, :]
    valid = np.arange(width)[None, :] < lens[:, None]
    mat = np.where(valid, np.concatenate([data, np.zeros(width + 1, np.uint8)])[idx], 0).astype(
        np.uint8
    )
    words = np.ascontiguousarray(mat).view("<u4").reshape(n, width // 4) if width else None
    with np.errstate(over="ignore"):
        h = (np.uint32(_SEED) ^ lens.astype(np.uint32)).astype(np.uint32)
        nwords = lens // 4
        for j in range(width // 4):
            sel = nwords > j
            if not sel.any():
                break
            k = words[sel, j] * _M  # type: ignore[index]
            k ^= k >> np.uint32(24)
            k *= _M
            hs = h[sel] * _M
            hs ^= k
            h[sel] = hs
        rem = lens % 4
        base = nwords * 4
        rows = np.arange(n)
        t = np.zeros(n, np.uint32)
        for r, shift in ((3, 16), (2, 8), (1, 0)):
            sel = rem >= r
            if sel.any():
                t[sel] ^= mat[rows[sel], base[sel] + r - 1].astype(np.uint32) << np.uint32(shift)
        tail = rem > 0
        h[tail] = (h[tail] ^ t[tail]) * _M
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h


def partition_for(keys: pa.Array, num_partitions: int) -> np.ndarray:
    return ((murmur2(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)
