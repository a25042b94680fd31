"""The hand-written Fetch request decoder against kio's, for every version it accepts:
requests encoded by kio (fully populated samples, samples with nulls, and the shapes real
clients and followers send) decode to the same fields; every truncation of them, trailing
bytes and inflated counts are refused with FetchRequestError."""

from __future__ import annotations

import datetime
import uuid

import pytest

from protocol.samples import sample_request
from yak.protocol import kio_compat
from yak.protocol.fetch_client_codec import (
    FetchRequestPartition,
    FetchRequestTopic,
    encode_fetch_request,
)
from yak.protocol.fetch_codec import (
    MAX_VERSION,
    MIN_VERSION,
    FetchRequestError,
    decode_fetch_request,
)
from yak.protocol.framing import parse_request_header, skip_header_tagged_fields

VERSIONS = [v for v in range(MIN_VERSION, MAX_VERSION + 1)
            if v in kio_compat.known_versions(1)]


def _kio_fields(req: object, version: int) -> dict[str, object]:
    state = getattr(req, "replica_state", None)
    topics = []
    for t in req.topics:
        parts = [(p.partition, p.fetch_offset, p.partition_max_bytes,
                  getattr(p, "current_leader_epoch", -1), getattr(p, "last_fetched_epoch", -1),
                  getattr(p, "log_start_offset", -1)) for p in t.partitions]
        topics.append((getattr(t, "topic", None), getattr(t, "topic_id", None), parts))
    forgotten = [(getattr(f, "topic", None), getattr(f, "topic_id", None), list(f.partitions))
                 for f in getattr(req, "forgotten_topics_data", ())]
    return {
        "replica_id": state.replica_id if version >= 15 and state is not None
        else (getattr(req, "replica_id", -1) if version < 15 else -1),
        "replica_epoch": state.replica_epoch if version >= 15 and state is not None else -1,
        "max_wait": kio_compat.timedelta_to_ms(req.max_wait),
        "min_bytes": req.min_bytes, "max_bytes": req.max_bytes,
        "isolation_level": req.isolation_level,
        "session_id": getattr(req, "session_id", 0),
        "session_epoch": getattr(req, "session_epoch", -1),
        "topics": topics, "forgotten": forgotten, "rack_id": getattr(req, "rack_id", "") or "",
    }


def _mine(data: object) -> dict[str, object]:
    return {
        "replica_id": data.replica_id, "replica_epoch": data.replica_epoch,
        "max_wait": data.max_wait, "min_bytes": data.min_bytes, "max_bytes": data.max_bytes,
        "isolation_level": data.isolation_level, "session_id": data.session_id,
        "session_epoch": data.session_epoch,
        "topics": [(t.topic, t.topic_id, [(p.partition, p.fetch_offset, p.partition_max_bytes,
                                           p.current_leader_epoch, p.last_fetched_epoch,
                                           p.log_start_offset) for p in t.partitions])
                   for t in data.topics],
        "forgotten": [(n, i, list(ps)) for n, i, ps in data.forgotten],
        "rack_id": data.rack_id,
    }


def _body(req: object) -> memoryview:
    return memoryview(kio_compat.encode(req))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("nulls", [False, True])
def test_samples_decode_like_kio(version: int, nulls: bool) -> None:
    cls = kio_compat.request_class(1, version)
    req = sample_request(cls, nulls)
    try:
        body = _body(req)
    except Exception:
        pytest.skip("a schema whose nullable fields cannot be null")
    assert _mine(decode_fetch_request(version, body)) == _kio_fields(req, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_consumers_request_decodes_like_kio(version: int) -> None:
    mod = kio_compat.schema_module("fetch", version, "request")
    part = kio_compat.build(mod.FetchPartition, partition=3, fetch_offset=2**40,
                            partition_max_bytes=1 << 20, current_leader_epoch=7,
                            log_start_offset=-1, last_fetched_epoch=-1)
    topic = kio_compat.build(mod.FetchTopic, topic="orders-" + "x" * 150,
                             topic_id=uuid.UUID(int=99), partitions=(part, part))
    req = kio_compat.build(
        mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1, max_bytes=50 << 20, isolation_level=1, session_id=0, session_epoch=-1,
        topics=(topic,) * 3, forgotten_topics_data=(), rack_id="rack-a", cluster_id=None)
    assert _mine(decode_fetch_request(version, _body(req))) == _kio_fields(req, version)


@pytest.mark.parametrize("version", [12, 13, 15, 16])
def test_a_followers_request_decodes(version: int) -> None:
    tid = uuid.uuid4()
    frame = encode_fetch_request(version, 5, "yak-replica-3", 3, 77, 500, 1, 10 << 20, [
        FetchRequestTopic(tid, "t", [FetchRequestPartition(0, 10, 4, 3, 0, 1 << 20)])])
    body = memoryview(bytes(frame[4:]))
    _, _, _, _, pos = parse_request_header(body)
    pos = skip_header_tagged_fields(body, pos)
    data = decode_fetch_request(version, body[pos:])
    assert (data.replica_id, data.replica_epoch) == (3, 77 if version >= 15 else -1)
    (t,) = data.topics
    assert (t.topic_id if version >= 13 else t.topic) == (tid if version >= 13 else "t")
    (p,) = t.partitions
    assert (p.fetch_offset, p.current_leader_epoch, p.last_fetched_epoch) == (10, 4, 3)


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_trailing_and_inflated_requests_are_refused(version: int) -> None:
    cls = kio_compat.request_class(1, version)
    body = bytes(_body(sample_request(cls, False)))
    for cut in range(len(body)):
        with pytest.raises(FetchRequestError):
            decode_fetch_request(version, memoryview(body[:cut]))
    with pytest.raises(FetchRequestError):
        decode_fetch_request(version, memoryview(body + b"\x00"))
    # A topic count announcing 2**30 topics in a few bytes is refused before any loop.
    offset = 12 if version >= 15 else 17
    offset += 8 if version >= 7 else 0
    inflated = body[:offset] + (b"\x80\x80\x80\x80\x04" if version >= 12
                                else b"\x40\x00\x00\x00") + body[offset + 1 if version >= 12
                                                                 else offset + 4:]
    with pytest.raises(FetchRequestError):
        decode_fetch_request(version, memoryview(inflated))
