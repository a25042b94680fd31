"""Executor side of the source: fetch one offset range and yield Arrow record batches."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from yak.client import KafkaClient
from yak.errors import ErrorCode, error_for_code
from yak.spark.offsets import DataLossError, OffsetRange
from yak.spark.options import ClientSettings
from yak.spark.record_decoder import HEADERS_TYPE, DecodedColumns, decode

log = logging.getLogger(__name__)

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def arrow_schema(include_headers: bool, value_type: pa.DataType | None = None) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", value_type or pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def _constant_string(s: str, n: int) -> pa.Array:
    b = s.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(b)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b * n)])


def read_range(
    settings: ClientSettings,
    rng: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    value_decoder: Any = None,
) -> Iterator[pa.RecordBatch]:
    """Records with offsets in [rng.start, rng.end), in order, as Arrow batches.

    With a `value_decoder` (option valueFormat) the value column is decoded through the
    schema registry into the struct type the decoder was made for."""
    schema = arrow_schema(include_headers, value_decoder.target if value_decoder else None)
    tp = (rng.topic, rng.partition)
    offset = rng.start
    idle = 0
    with settings.client() as client:
        while offset < rng.end:
            resp = client.fetch(
                {tp: offset},
                max_wait_ms=settings.fetch_max_wait_ms,
                max_bytes=settings.fetch_max_bytes,
                partition_max_bytes=settings.partition_fetch_max_bytes,
                isolation_level=settings.isolation_level,
            )[tp]
            if resp.error == ErrorCode.offset_out_of_range:
                offset = _out_of_range(client, rng, offset, fail_on_data_loss)
                continue
            if resp.error != 0:
                err = error_for_code(resp.error, f"fetch {rng.topic}-{rng.partition}@{offset}")
                if err.retriable:
                    client._leaders.clear()
                    continue
                raise err
            cols = decode(
                resp.records,
                offset,
                rng.end,
                include_headers=include_headers,
                aborted=resp.aborted if settings.isolation_level == 1 else None,
            )
            if cols.next_offset <= offset:
                if resp.high_watermark <= offset:
                    # the range was planned up to rng.end but the log ends before it
                    _missing(rng, offset, resp.high_watermark, fail_on_data_loss)
                    return
                idle += 1
                if idle > 100:
                    raise DataLossError(
                        f"{rng.topic}-{rng.partition}: no progress past offset {offset} "
                        f"(high watermark {resp.high_watermark})"
                    )
                continue
            idle = 0
            offset = cols.next_offset
            if len(cols) == 0:
                continue
            yield to_record_batch(cols, rng.topic, rng.partition, schema, value_decoder)


def to_record_batch(cols: DecodedColumns, topic: str, partition: int, schema: pa.Schema,
                    value_decoder: Any = None) -> pa.RecordBatch:
    """Decoded columns -> one batch of Spark's Kafka schema (shared by the fetch path and
    the direct read of tiered segments, so both give identical rows)."""
    n = len(cols)
    value = cols.value
    if value_decoder is not None:
        value = value_decoder.decode(value, cols.offset, topic, partition)
    arrays = [
        cols.key,
        value,
        _constant_string(topic, n),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(cols.offset),
        pa.array(cols.timestamp_ms * 1000, type=TIMESTAMP_TYPE),
        pa.array(cols.timestamp_type),
    ]
    if cols.headers is not None and "headers" in schema.names:
        arrays.append(cols.headers)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _out_of_range(client: KafkaClient, rng: OffsetRange, offset: int, fail: bool) -> int:
    from yak.client import EARLIEST

    earliest = client.list_offsets({(rng.topic, rng.partition): EARLIEST})[
        (rng.topic, rng.partition)
    ]
    if offset < earliest:
        if fail:
            raise DataLossError(
                f"offsets {offset}..{earliest - 1} of {rng.topic}-{rng.partition} were removed "
                "(retention or deletion) before they were read; set failOnDataLoss=false to "
                "skip them"
            )
        log.warning(
            "skipping lost offsets %d..%d of %s-%d", offset, earliest - 1, rng.topic, rng.partition
        )
        return min(earliest, rng.end)
    _missing(rng, offset, offset, fail)
    return rng.end


def _missing(rng: OffsetRange, offset: int, end: int, fail: bool) -> None:
    msg = (
        f"{rng.topic}-{rng.partition}: offsets {offset}..{rng.end - 1} were planned but the "
        f"log ends at {end} (truncated or deleted)"
    )
    if fail:
        raise DataLossError(msg + "; set failOnDataLoss=false to skip them")
    log.warning(msg)
