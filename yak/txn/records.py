"""Kafka's record formats for `__transaction_state`, and its id-to-partition hash.

Yak writes what Kafka writes so that a transactional id lands on the partition
Kafka would pick and Kafka's own tooling (`kafka-dump-log --transaction-log-decoder`,
`TransactionLogMessageFormatter`) can read a Yak log:

    key   = int16 version 0 | TransactionLogKey v0: TransactionalId (int16-length string)
    value = int16 version   | TransactionLogValue v0 (plain) or v1 (flexible):
            ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32,
            TransactionStatus int8, TransactionPartitions nullable [Topic, [int32]],
            TransactionLastUpdateTimestampMs int64, TransactionStartTimestampMs int64,
            v1 tagged fields: 0 PreviousProducerId int64, 1 NextProducerId int64,
            2 ClientTransactionVersion int16
    a None value (tombstone) = the id expired.

Yak writes value v0, which is what Kafka writes unless the `transaction.version`
feature is finalized at 1 or more (Kafka 4): every Kafka version's tools read v0.
Both versions are read. Partitions are null in the Empty state, as Kafka writes them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from yak.group.records import java_string_hash
from yak.protocol.primitives import read_tagged_fields, read_uvarint, uvarint_bytes
from yak.txn.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionState,
    TxnTransitMetadata,
)

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "DEFAULT_NUM_PARTITIONS",
    "MAX_TRANSACTIONAL_ID_BYTES",
    "encode_key",
    "decode_key",
    "encode_value",
    "decode_value",
    "partition_for",
    "transaction_topic_configs",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
def transaction_topic_configs(segment_bytes: int, min_isr: int) -> dict[str, str]:
    """Kafka's `transactionTopicConfigs` for `__transaction_state`."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": str(min_isr),
        "segment.bytes": str(segment_bytes),
    }


DEFAULT_NUM_PARTITIONS = 50  # transaction.state.log.num.partitions
MAX_TRANSACTIONAL_ID_BYTES = 32767

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_V0_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")  # last update, start


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount`."""
    h = java_string_hash(transactional_id)
    h = 0 if h == -(1 << 31) else abs(h)
    return h % num_partitions


# ---------------------------------------------------------------- writing


def _str16(s: str) -> bytes:
    b = s.encode()
    if len(b) > MAX_TRANSACTIONAL_ID_BYTES:
        raise ValueError(f"string of {len(b)} bytes does not fit an int16 length")
    return _I16.pack(len(b)) + b


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _str16(transactional_id)


def _grouped(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return [(t, sorted(ps)) for t, ps in sorted(by_topic.items())]


def encode_value(t: TxnTransitMetadata, version: int = 0) -> bytes:
    """The value for a transition; `version` 0 (plain) or 1 (flexible, tagged fields)."""
    if t.state is TransactionState.EMPTY and t.partitions:
        raise ValueError(f"an Empty transaction has no partitions: {t}")
    if t.state is TransactionState.DEAD:
        raise ValueError("Dead is written as a tombstone, never as a value")
    groups = None if t.state is TransactionState.EMPTY else _grouped(t.partitions)
    head = _V0_HEAD.pack(version, t.producer_id, t.producer_epoch, t.txn_timeout_ms, t.state.value)
    tail = _TAIL.pack(t.txn_last_update_timestamp, t.txn_start_timestamp)
    if version == 0:
        parts = [head]
        if groups is None:
            parts.append(_I32.pack(-1))
        else:
            parts.append(_I32.pack(len(groups)))
            for topic, ids in groups:
                parts += [_str16(topic), _I32.pack(len(ids)), struct.pack(f">{len(ids)}i", *ids)]
        parts.append(tail)
        return b"".join(parts)
    if version == 1:
        parts = [head]
        if groups is None:
            parts.append(uvarint_bytes(0))
        else:
            parts.append(uvarint_bytes(len(groups) + 1))
            for topic, ids in groups:
                tb = topic.encode()
                parts += [
                    uvarint_bytes(len(tb) + 1),
                    tb,
                    uvarint_bytes(len(ids) + 1),
                    struct.pack(f">{len(ids)}i", *ids),
                    uvarint_bytes(0),  # no tagged fields in PartitionsSchema
                ]
        parts.append(tail)
        tags = []
        if t.last_producer_id != NO_PRODUCER_ID:
            tags.append(uvarint_bytes(0) + uvarint_bytes(8) + _I64.pack(t.last_producer_id))
        parts.append(uvarint_bytes(len(tags)))
        parts += tags
        return b"".join(parts)
    raise ValueError(f"TransactionLogValue version {version} is not known")


# ---------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.buf):
            raise ValueError("record too short")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return int(v)

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def uvarint(self) -> int:
        n, self.pos = read_uvarint(self.buf, self.pos)
        return n

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError("field overruns the record")
        b = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return b

    def count(self, n: int, item_size: int) -> int:
        """An array count, bounded by the bytes left (a corrupt count must not allocate)."""
        if n < 0 or n * item_size > len(self.buf) - self.pos:
            raise ValueError(f"array of {n} does not fit the record")
        return n


def decode_key(buf: bytes) -> str | None:
    """The transactional id, or None for a key version Kafka would skip too."""
    r = _Reader(buf)
    if r.i16() != 0:
        return None
    n = r.i16()
    return r.raw(n).decode()


def decode_value(buf: bytes) -> TxnTransitMetadata:
    """A value read back from the log. Kafka does not store the last epoch in v0/v1, so
    it reloads as -1 (a KIP-360 retry spanning a failover is refused, as in Kafka)."""
    r = _Reader(buf)
    version = r.i16()
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version}")
    producer_id, epoch, timeout, status = r.i64(), r.i16(), r.i32(), r.i8()
    try:
        state = TransactionState(status)
    except ValueError:
        raise ValueError(f"unknown transaction state id {status}") from None
    partitions: set[TopicPartition] = set()
    if version == 0:
        n = r.i32()
        if n >= 0:
            for _ in range(r.count(n, 6)):
                topic = r.raw(r.i16()).decode()
                for _ in range(r.count(r.i32(), 4)):
                    partitions.add((topic, r.i32()))
    else:
        n = r.uvarint() - 1
        if n >= 0:
            for _ in range(r.count(n, 3)):
                topic = r.raw(r.uvarint() - 1).decode()
                for _ in range(r.count(r.uvarint() - 1, 4)):
                    partitions.add((topic, r.i32()))
                _skip_tags(r)
    last_update, start = r.i64(), r.i64()
    last_producer_id = NO_PRODUCER_ID
    if version == 1:
        for tag, data in _read_tags(r):
            if tag == 0 and len(data) == 8:
                (last_producer_id,) = _I64.unpack(data)
    if state is TransactionState.EMPTY:
        partitions = set()  # Kafka ignores partitions of an Empty record
    return TxnTransitMetadata(
        producer_id,
        last_producer_id,
        epoch,
        NO_PRODUCER_EPOCH,
        timeout,
        state,
        frozenset(partitions),
        start,
        last_update,
    )


def _read_tags(r: _Reader) -> list[tuple[int, bytes]]:
    fields, r.pos = read_tagged_fields(memoryview(r.buf), r.pos)
    return [(tag, bytes(value)) for tag, value in fields.items()]


def _skip_tags(r: _Reader) -> None:
    _read_tags(r)
