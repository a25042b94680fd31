"""Batch validation before an append (Kafka's LogValidator): one job, decide whether the
bytes of a Produce (or of a replica fetch) may be written, and with which headers.

Separate from the log because it needs nothing of it: no lock, no segment, no offset. It
reads the batches and the topic's config and either returns their headers or raises a
`yak.errors` exception, before any byte is written. `PartitionLog.append_as_leader` and
`append_as_follower` call `validate_batches` once per append; it parses each batch header
once (the caller's already-parsed first header is reused) and touches records only where
a config asks for it (compacted topics' keys) or a header lies about its timestamps.
"""

from __future__ import annotations

import crc32c

from yak.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from yak.protocol.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    OFFSET_PREFIX,
    BatchHeader,
    decode_records,
    keyless_records,
    read_header,
)
from yak.storage.config import LogConfig


def validate_batches(
    mv: memoryview,
    cfg: LogConfig,
    compact: bool,
    leader: bool,
    now: int,
    first: BatchHeader | None,
    topic: str,
    partition: int,
) -> list[BatchHeader]:
    """Check every batch before anything is written; returns their headers (the batches
    are consecutive from position 0). `first` is the header at position 0 if the caller
    has parsed it already (the Produce handler does), so no batch is parsed twice.
    `leader`: a client's batches (counts, no control batches, timestamps and keys checked);
    otherwise a leader's, which already carry offsets."""
    n = len(mv)
    if n == 0:
        raise InvalidRecordError("empty record set")
    out: list[BatchHeader] = []
    pos = 0
    check_ts = leader and not cfg.log_append_time
    check_keys = leader and compact
    before = cfg.message_timestamp_before_max_ms
    after = cfg.message_timestamp_after_max_ms
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise CorruptRecordError(f"truncated batch at byte {pos}")
        h = first if pos == 0 and first is not None else read_header(mv, pos)
        blen = h.batch_length
        size = blen + LOG_OVERHEAD
        if h.magic != MAGIC:
            raise CorruptRecordError(f"record batch magic {h.magic}, only 2 is supported")
        if blen < HEADER_SIZE - LOG_OVERHEAD or pos + size > n:
            raise CorruptRecordError(f"batch length {blen} does not match the data")
        # A follower takes what its leader took (Kafka's appendAsFollower ignores the
        # record size): a limit lowered after a larger batch was accepted must not stop
        # the topic's replication.
        if leader and size > cfg.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {size} bytes exceeds max.message.bytes={cfg.max_message_bytes}"
            )
        if crc32c.crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size]) != h.crc:
            raise CorruptRecordError(f"CRC mismatch in batch at byte {pos}")
        lod = h.last_offset_delta
        if leader:
            count = h.record_count
            if count <= 0 or lod != count - 1:
                raise InvalidRecordError(
                    f"record count {count} inconsistent with last offset delta {lod}"
                )
            if h.attributes & CONTROL_BIT:
                raise InvalidRecordError("clients may not write control batches")
        elif lod < 0:
            raise CorruptRecordError("negative last offset delta")
        if check_ts:
            for ts in (h.base_timestamp, h.max_timestamp):
                if now - ts > before or ts - now > after:
                    raise InvalidTimestampError(
                        f"timestamp {ts} out of range (now {now}, before.max.ms {before}, "
                        f"after.max.ms {after})"
                    )
        if check_keys:
            check_keys_present(mv[pos : pos + size], h, topic, partition)
        out.append(h)
        pos += size
    if n > cfg.segment_bytes:
        raise RecordBatchTooLargeError(f"{n} bytes exceed segment.bytes={cfg.segment_bytes}")
    return out


def check_keys_present(batch: memoryview, h: BatchHeader, topic: str, partition: int) -> None:
    """A compacted topic refuses records without a key, as Kafka's LogValidator does:
    INVALID_RECORD with one KIP-467 record error per keyless record (index in its
    batch), and nothing of the append is written. Costs a walk over the record framing
    (and the decompression of a compressed batch), only for compacted topics."""
    missing = keyless_records(batch, h)
    if not missing:
        return
    msg = (
        "Compacted topic cannot accept message without key in topic partition "
        f"{topic}-{partition}."
    )
    errors: list[tuple[int, str | None]] = [(i, msg) for i in missing]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{msg}')" for i in missing[:3])
    raise InvalidRecordError(
        f"One or more records have been rejected due to {len(missing)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]",
        record_errors=errors,
    )


def records_max_timestamps(
    mv: memoryview, headers: list[BatchHeader]
) -> list[int | None] | None:
    """Per batch, the maximum of its records' timestamps where the header's MaxTimestamp
    is not it (None where it is); None if no batch needs a look.

    Kafka's LogValidator rewrites every batch's MaxTimestamp to the maximum of its records'
    timestamps (NO_TIMESTAMP, -1, if none has one); Yak indexes and keeps the header as it
    came, so it must not trust a wrong one. librdkafka writes one: records produced with
    timestamp -1 (librdkafka's test 0053 does, through the C++ API) get base timestamp -1
    and MaxTimestamp 0, because its writer starts the maximum at 0. Indexed as
    it came, the segment's max timestamp was 0 (1970): retention deleted it at the next
    maintenance tick, and an earliest ListOffsets then answered the high watermark, so a
    consumer at OFFSET_BEGINNING got nothing (issue 21). With -1 the segment falls back to
    its file's mtime for retention and is not in the time index, as in Kafka.

    Only a header that claims no real time (base timestamp < 0, or MaxTimestamp <= 0) is
    checked, by decoding its records (the slow path, never taken by a client with a clock);
    a sane header costs two comparisons.
    """
    out: list[int | None] | None = None
    pos = 0
    for i, h in enumerate(headers):
        size = h.batch_length + LOG_OVERHEAD
        if h.base_timestamp < 0 or h.max_timestamp <= 0:
            true_max = NO_TIMESTAMP
            for rec in decode_records(mv[pos : pos + size]):
                if rec.timestamp is not None and rec.timestamp > true_max:
                    true_max = rec.timestamp
            if true_max != h.max_timestamp:
                if out is None:
                    out = [None] * len(headers)
                out[i] = true_max
        pos += size
    return out


def max_timestamp_header(
    mv: memoryview, pos: int, h: BatchHeader, base_offset: int, leader_epoch: int,
    max_timestamp: int,
) -> bytearray:
    """A copy of the batch's 61-byte header with offsets assigned and `max_timestamp` as its
    MaxTimestamp, the CRC recomputed over it and the records (not copied) after it."""
    hdr = bytearray(mv[pos : pos + HEADER_SIZE])
    OFFSET_PREFIX.pack_into(hdr, 0, base_offset, h.batch_length, leader_epoch)
    hdr[MAX_TIMESTAMP_OFFSET : MAX_TIMESTAMP_OFFSET + 8] = max_timestamp.to_bytes(
        8, "big", signed=True)
    body = mv[pos + HEADER_SIZE : pos + h.batch_length + LOG_OVERHEAD]
    crc = crc32c.crc32c(body, crc32c.crc32c(memoryview(hdr)[ATTRIBUTES_OFFSET:]))
    hdr[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return hdr
