"""The hand-written OffsetCommit response encoder must equal kio's, byte for byte."""

from __future__ import annotations

import pytest

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode, build
from yak.protocol.offset_commit_codec import (
    MAX_VERSION,
    MIN_VERSION,
    encode_offset_commit_response,
)

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)


def _kio(version: int, by_topic: dict[str, list[tuple[int, ErrorCode]]],
         throttle_ms: int = 0) -> bytes:
    mod = kio_compat.schema_module("offset_commit", version, "response")
    cls = kio_compat.response_class(8, version)
    return kio_compat.encode(build(
        cls,
        throttle_time=kio_compat.ms_to_timedelta(throttle_ms),
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
    ))


@pytest.mark.parametrize("version", VERSIONS)
def test_matches_kio(version: int) -> None:
    by_topic = {
        "orders": [(0, ErrorCode.none), (7, ErrorCode.offset_metadata_too_large)],
        "é-topic": [(3, ErrorCode.unknown_topic_or_partition)],
        "t" * 200: [(i, ErrorCode.illegal_generation) for i in range(130)],  # 2-byte varints
    }
    assert encode_offset_commit_response(version, by_topic) == _kio(version, by_topic)
    assert encode_offset_commit_response(version, by_topic, 25) == _kio(version, by_topic, 25)


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_and_int_codes(version: int) -> None:
    assert encode_offset_commit_response(version, {}) == _kio(version, {})
    as_ints = {"t": [(0, 25), (1, 0)]}
    expected = _kio(version, {"t": [(0, ErrorCode(25)), (1, ErrorCode.none)]})
    assert encode_offset_commit_response(version, as_ints) == expected


@pytest.mark.parametrize("version", [MIN_VERSION - 1, MAX_VERSION + 1])
def test_unsupported_version_refused(version: int) -> None:
    with pytest.raises(ValueError):
        encode_offset_commit_response(version, {})
