"""ShareFetch (KIP-932): acquire records for a share group member, with the
acknowledgements of earlier records piggy-backed.

Translation only: the share session's epoch rules (yak/share/session.py), the
acknowledgements and acquisitions (yak/share/manager.py, partition.py) are policy there.
Topics are named by id; one topic repeated in a request (librdkafka may do so) is merged
by id. The acknowledgements are applied before the first await, so they take effect in
the connection's order, then made durable (the share coordinator) before the fetch.
`min_bytes` goes to the manager's wait (Kafka's DelayedShareFetch: no acquisition until
that many bytes can be acquired or `max_wait` passes).
Records go back as whole batches; AcquiredRecords says which offsets the member holds
and with which delivery count. On a plaintext connection (the connection's `sendfile`
extra, as for Fetch) the batches stay in the segment files as `FileRegion`s
(yak/share/log_read.py) and go out by `sendfile`, never copied through Python. The response is encoded by hand
(yak/protocol/share_fetch_codec.py, a RawResponse): the read's batch views go to the
transport as they are, no kio dataclass per partition or acquired range, no join. Error
responses before any partition is looked at (`_top`) stay kio's.

The request quota's throttle is known only after the handler returns (the connection
measures the handler's time): the connection writes it into the encoded body at
`RawResponse.throttle_offset` (0: the body opens with throttle_time_ms), as for Produce
and Fetch.
"""

from __future__ import annotations

import uuid
from typing import Any

from yak.broker.context import RawResponse, RequestContext
from yak.broker.handlers._group import require_group, response
from yak.broker.handlers._share import manager, node_endpoints, topic_name
from yak.protocol.kio_compat import ErrorCode, ms_to_timedelta, timedelta_to_ms
from yak.protocol.share_fetch_codec import (
    SharePartitionData,
    ShareTopicData,
    encode_share_fetch_response,
)
from yak.security.acl import AclOperation, ResourceType
from yak.share.session import FINAL_EPOCH, INITIAL_EPOCH, ShareSessionError

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 2

Key = tuple[uuid.UUID, int]
# ShareFetch v2's share_acquire_mode (KIP-1206): 0 batch-optimized (the default, and v1's
# only mode: max_records is a soft limit, whole batches acquired), 1 record-limit.
RECORD_LIMIT = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    group_id = request.group_id or ""
    require_group(ctx, AclOperation.READ, group_id)
    share = manager(ctx)
    if share is None:
        return _top(ctx, ErrorCode.coordinator_not_available)
    member_id = request.member_id or ""
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:  # only a member may open a session; later acks still count
        code = share.check_member(group_id, member_id)
        if code is not ErrorCode.none:
            return _top(ctx, code)
    # Merge by topic id: acknowledgements per partition, in request order.
    acks: dict[Key, list[tuple[int, int, tuple[int, ...]]]] = {}
    for t in request.topics:
        if t.topic_id is None:
            continue
        for p in t.partitions:
            batch = acks.setdefault((t.topic_id, p.partition_index), [])
            batch.extend((b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                         for b in p.acknowledgement_batches)
    try:
        if epoch == INITIAL_EPOCH:
            if any(acks.values()):
                return _top(ctx, ErrorCode.invalid_request,
                            "acknowledgements in the first request of a share session")
            session, old = share.sessions.open(group_id, member_id)
            if old is not None:
                share.session_closed(group_id, member_id)
        else:
            session = share.sessions.advance(group_id, member_id, epoch)
    except ShareSessionError as e:
        return _top(ctx, e.code, str(e))
    if session is not None:  # None: a final request after the session went
        for f in request.forgotten_topics_data:
            for part in f.partitions:
                session.partitions.pop((f.topic_id, part), None)
        for key in acks:
            session.partitions[key] = None
    # Acknowledgements first, synchronously (before any await).
    ack_codes: dict[Key, ErrorCode] = {}
    acked: dict[tuple[str, int], Key] = {}
    for key, batches in acks.items():
        if not batches:
            continue
        name = topic_name(ctx, key[0])
        ack_codes[key] = (ErrorCode.unknown_topic_id if name is None
                          else share.acknowledge(group_id, member_id, name, key[1], batches))
        if name is not None:
            acked[(name, key[1])] = key
    errors: dict[Key, ErrorCode] = {}
    wanted_keys: list[Key] = []
    wanted: list[tuple[str, int]] = []
    if epoch == FINAL_EPOCH or session is None:
        share.sessions.close(group_id, member_id)
        share.session_closed(group_id, member_id)
    else:
        for key in session.partitions:
            name = topic_name(ctx, key[0])
            if name is None:
                errors[key] = ErrorCode.unknown_topic_id
            elif not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, name):
                errors[key] = ErrorCode.topic_authorization_failed
            else:
                wanted_keys.append(key)
                wanted.append((name, key[1]))
    # The acknowledgements are durable (the share coordinator, acks=all) before they are
    # answered: written with this fetch's acquisitions, or before it waits.
    ack_errors: dict[tuple[str, int], ErrorCode] = {}
    if wanted:
        results = await share.fetch(
            group_id, member_id, wanted, max_records=request.max_records,
            max_bytes=request.max_bytes, max_wait_ms=timedelta_to_ms(request.max_wait),
            acked=list(acked), ack_errors=ack_errors,
            record_limit=ctx.api_version >= 2 and request.share_acquire_mode == RECORD_LIMIT,
            regions=ctx.extras.get("sendfile", False), min_bytes=request.min_bytes)
    else:
        results = []
        ack_errors = await share.persist(group_id, acked)
    for tp, code in ack_errors.items():
        ack_codes[acked[tp]] = code
    by_topic: dict[uuid.UUID, ShareTopicData] = {}
    leaders: set[int] = set()
    fetched = dict(zip(wanted_keys, results, strict=True))
    for key in dict.fromkeys([*acks, *errors, *wanted_keys]):
        r = fetched.get(key)
        err = errors.get(key, r.error if r is not None else ErrorCode.none)
        ack = ack_codes.get(key, ErrorCode.none)
        if r is not None and not r.acquired and err is ErrorCode.none and key not in acks:
            continue  # nothing to say about this partition
        leader = r.leader if r is not None else (-1, -1)
        leaders.add(leader[0])
        part = SharePartitionData(
            key[1], int(err), None if err is ErrorCode.none else err.name, int(ack),
            None if ack is ErrorCode.none else ack.name, leader[0], leader[1])
        if r is not None:
            part.records = r.records  # the read's batch views, never joined
            part.records_size = sum(len(b) for b in r.records)
            part.acquired = r.acquired
        topic = by_topic.get(key[0])
        if topic is None:
            topic = by_topic[key[0]] = ShareTopicData(key[0])
        topic.partitions.append(part)
    out, size = encode_share_fetch_response(
        ctx.api_version, list(by_topic.values()),
        acquisition_lock_timeout_ms=share.lock_duration_ms(group_id),
        throttle_ms=ctx.throttle_time_ms,
        node_endpoints=node_endpoints(ctx, "share_fetch", leaders))
    return RawResponse(out, size, flexible_header=True, throttle_offset=0)


def _top(ctx: RequestContext, code: ErrorCode, message: str | None = None) -> Any:
    return response(ctx, error_code=code, error_message=message or code.name,
                    acquisition_lock_timeout=ms_to_timedelta(0), responses=(),
                    node_endpoints=())
