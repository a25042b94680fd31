"""The hand-written OffsetCommit response encoder must equal kio's, byte for byte."""

from __future__ import annotations

import pytest

from yak.broker.handlers.offset_commit import encode_response
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode, build


@pytest.mark.parametrize("version", range(2, 10))
def test_matches_kio(version: int) -> None:
    by_topic = {
        "orders": [(0, ErrorCode.none), (7, ErrorCode.offset_metadata_too_large)],
        "é-topic": [(3, ErrorCode.unknown_topic_or_partition)],
    }
    mod = kio_compat.schema_module("offset_commit", version, "response")
    cls = kio_compat.response_class(8, version)
    expected = build(
        cls,
        throttle_time=kio_compat.ms_to_timedelta(0),
        topics=tuple(
            build(
                mod.OffsetCommitResponseTopic,
                name=t,
                partitions=tuple(
                    build(mod.OffsetCommitResponsePartition, partition_index=p, error_code=c)
                    for p, c in parts
                ),
            )
            for t, parts in by_topic.items()
        ),
    )
    raw = encode_response(version, by_topic)
    body = b"".join(raw.buffers)
    assert body == kio_compat.encode(expected)
    assert raw.size == len(body)
    assert raw.flexible_header == (version >= 8)
