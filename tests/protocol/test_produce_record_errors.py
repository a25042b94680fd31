"""KIP-467 `record_errors` in the hand-written Produce response encoder: the same bytes as
kio's, for every version (v8+ carry them; older versions have no such field)."""

from __future__ import annotations

import datetime
import uuid

import pytest

from yak.protocol import kio_compat
from yak.protocol.produce_codec import (
    MAX_VERSION,
    MIN_VERSION,
    ProducePartitionResult,
    encode_produce_response,
)

MSG = "Compacted topic cannot accept message without key in topic partition c-0."


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_record_errors_same_bytes_as_kio(version: int) -> None:
    parts = [
        ProducePartitionResult(0, 0, 1234, -1, 0, None),
        ProducePartitionResult(1, 87, -1, -1, -1, "One or more records have been rejected",
                               [(1, MSG), (3, None), (70000, "é")]),
        ProducePartitionResult(2, 87, -1, -1, -1, None, [(0, MSG)]),
    ]
    tid = uuid.uuid4()
    ours = encode_produce_response(version, [("c", tid, parts)], throttle_ms=0)
    mod = kio_compat.schema_module("produce", version, "response")
    kio_parts = []
    for p in parts:
        errs = tuple(
            kio_compat.build(mod.BatchIndexAndErrorMessage, batch_index=i,
                             batch_index_error_message=m)
            for i, m in p.record_errors
        ) if version >= 8 else ()
        kio_parts.append(kio_compat.build(
            mod.PartitionProduceResponse, index=p.index,
            error_code=kio_compat.error_code(p.error_code), base_offset=p.base_offset,
            log_append_time=kio_compat.ms_to_datetime(p.log_append_time),
            log_start_offset=p.log_start_offset, record_errors=errs,
            error_message=p.error_message))
    topic = kio_compat.build(mod.TopicProduceResponse, name="c", topic_id=tid,
                             partition_responses=tuple(kio_parts))
    theirs = kio_compat.encode(kio_compat.build(
        mod.ProduceResponse, responses=(topic,), throttle_time=datetime.timedelta(0)))
    assert ours == theirs
