"""Fetch: translate the request for `ReplicaManager.fetch_messages`, encode what it read.

The partition layer does the work Kafka's ReplicaManager does: the per-partition checks
(current leader epoch, leadership, offset range), Kafka's byte limits (each partition at
most `partition_max_bytes`, the response at most `max_bytes`, except that the first
partition with data always returns one whole batch) and the long-poll in the fetch
purgatory when there is less than `min_bytes`. Here the topics are resolved (by name, or
by topic id for v13+) and the result is encoded. The request is decoded by hand
(`fetch_codec.decode_fetch_request`): every consumer and follower sends one per round trip.

Batches read from storage go to the socket as the buffers storage returned (see
`yak.protocol.fetch_codec`); nothing is decoded or concatenated here.

Fetch sessions (KIP-227) are answered with session id 0, which clients accept as "no
session": they keep sending full requests.

A follower's fetch (replica id >= 0; v15+ in `replica_state` with its broker epoch) reads
up to the log end, carries each partition's `last_fetched_epoch` so the partition layer
can answer a `diverging_epoch`, and is neither counted as messages out nor held to
consumer quotas (Kafka counts replication separately).

Fetch from follower (KIP-392, issue 23): a consumer's Fetch v11+ carries its `rack_id`; the
partition layer lets such a consumer read a partition this broker follows, and on the
leader may answer a `preferred_read_replica` instead of records. A consumer asking a
broker that hosts no replica of an existing partition gets NOT_LEADER_OR_FOLLOWER, as
Kafka answers from its metadata cache, so a client whose preferred replica left the
replica set goes back to the leader.
"""

from __future__ import annotations

import uuid
from typing import Any

from yak.broker.context import RawResponse, RequestContext
from yak.partition import FetchIsolation, FetchParams, FetchPartition
from yak.protocol.fetch_codec import (
    EpochEndOffset,
    FetchPartitionResult,
    FetchRequestData,
    FetchTopicResult,
    LeaderIdAndEpoch,
    decode_fetch_request,
    encode_fetch_response,
)
from yak.protocol.kio_compat import ErrorCode
from yak.security.acl import AclOperation, ResourceType

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 16  # v17+ add KRaft replica directory ids; clients use <= 16
READ_COMMITTED = 1

_NO_ID = uuid.UUID(int=0)
E_UNKNOWN_ID = int(ErrorCode.unknown_topic_id)
E_TOPIC_DENIED = int(ErrorCode.topic_authorization_failed)
E_UNKNOWN_TP = int(ErrorCode.unknown_topic_or_partition)
E_NOT_LEADER = int(ErrorCode.not_leader_or_follower)
FIRST_RACK_VERSION = 11  # KIP-392: rack_id, preferred_read_replica
DENIED = -1  # slot of a partition the caller may not read


def decode_request(ctx: RequestContext, body: memoryview) -> FetchRequestData:
    return decode_fetch_request(ctx.api_version, body)


async def handle(ctx: RequestContext, request: FetchRequestData) -> RawResponse:
    v = ctx.api_version
    broker = ctx.broker
    by_id = v >= 13
    wanted: list[FetchPartition] = []
    # Per topic: its response entry, and for each partition either the index of its read
    # in `wanted` or None (a topic id this broker does not know).
    plan: list[tuple[FetchTopicResult, list[tuple[int, int | None]]]] = []
    # Authorization (Kafka's): a replica fetch (replica_id >= 0) needs CLUSTER_ACTION on the
    # cluster, a consumer's READ on each topic; denied partitions are answered
    # TOPIC_AUTHORIZATION_FAILED. Once per topic, never per record.
    authorizer = broker.authorizer
    replica_ok = True
    replica_id, replica_epoch = request.replica_id, request.replica_epoch
    if authorizer is not None and replica_id >= 0:
        replica_ok = ctx.cluster_authorized(AclOperation.CLUSTER_ACTION)
    for t in request.topics:
        # By id, the name only (`topic_name`): `by_id` builds a TopicInfo, with a parsed id
        # and a copied config dict, per topic of every follower's and consumer's fetch.
        name = broker.topics.topic_name(t.topic_id) if by_id else t.topic
        slots: list[tuple[int, int | None]] = []
        denied = authorizer is not None and name is not None and not (
            replica_ok and ctx.authorized(AclOperation.READ, ResourceType.TOPIC, name))
        for p in t.partitions:
            if denied:
                slots.append((p.partition, DENIED))
                continue
            if name is None:
                slots.append((p.partition, None))
                continue
            slots.append((p.partition, len(wanted)))
            wanted.append(FetchPartition(name, p.partition, p.fetch_offset,
                                         p.partition_max_bytes, p.current_leader_epoch,
                                         p.last_fetched_epoch, p.log_start_offset))
        plan.append((FetchTopicResult(name or "", t.topic_id or _NO_ID), slots))

    if replica_id >= 0:
        isolation = FetchIsolation.LOG_END
    elif request.isolation_level == READ_COMMITTED:
        isolation = FetchIsolation.TXN_COMMITTED
    else:
        isolation = FetchIsolation.HIGH_WATERMARK
    max_bytes = request.max_bytes
    quota = broker.quotas.fetch
    quota_on = quota.enabled and replica_id < 0
    if quota_on:  # never more than the consumer_byte_rate quota window holds
        max_bytes = int(min(max_bytes, quota.max_value_in_quota_window(
            ctx.principal, ctx.client_id or "")))
    # A plaintext connection sends the records with sendfile (yak/broker/connection.py):
    # storage then leaves them in the segment files (`FileRegion`), for consumers and
    # followers alike; TLS connections get the bytes.
    params = FetchParams(request.max_wait, request.min_bytes,
                         max_bytes, isolation, replica_id, replica_epoch,
                         zero_copy=ctx.extras.get("sendfile", False),
                         client_rack=request.rack_id
                         if v >= FIRST_RACK_VERSION and replica_id < 0 else None)
    reads = await broker.replica_manager.fetch_messages(params, wanted, ctx.turn)
    throttle = 0  # > 0: answer without data
    if quota_on:
        # consumer_byte_rate (Kafka's): the response size counts; a throttled fetch is
        # taken back and answered without data, to be fetched again after the throttle.
        size = sum(r.size for r in reads)
        throttle = quota.record_and_get_throttle_time_ms(ctx.principal, ctx.client_id or "",
                                                         size)
        if throttle:
            quota.unrecord(ctx.principal, ctx.client_id or "", size)
        ctx.throttle_time_ms = throttle

    metrics = broker.metrics
    count_out = replica_id < 0
    # A follower's fetch of a moving partition it is being added to: reassignment bytes.
    traffic = None if count_out else metrics.reassignment
    if traffic is not None and not traffic.moving():
        traffic = None  # nothing moves: nothing to count
    topics: list[FetchTopicResult] = []
    for topic, slots in plan:
        parts = topic.partitions
        buffers: list[Any] = []
        size = 0
        for index, slot in slots:
            if slot is None:
                parts.append(FetchPartitionResult(index, E_UNKNOWN_ID))
                continue
            if slot == DENIED:
                parts.append(FetchPartitionResult(index, E_TOPIC_DENIED))
                continue
            r = reads[slot]
            error = r.error
            if error == E_UNKNOWN_TP and count_out and _exists(broker.topics, topic.name, index):
                error = E_NOT_LEADER  # not hosted here, but a partition of the cluster
            if throttle:
                parts.append(FetchPartitionResult(index, error, r.high_watermark,
                                                  r.last_stable_offset, r.log_start_offset,
                                                  r.aborted_transactions))
                continue
            part = FetchPartitionResult(index, error, r.high_watermark,
                                        r.last_stable_offset, r.log_start_offset,
                                        r.aborted_transactions, r.preferred_read_replica,
                                        r.buffers, r.size)
            if r.diverging_epoch is not None:
                part.diverging_epoch = EpochEndOffset(*r.diverging_epoch)
            if r.current_leader is not None:
                part.current_leader = LeaderIdAndEpoch(*r.current_leader)
            parts.append(part)
            if r.size and count_out:
                buffers.extend(r.buffers)
                size += r.size
            elif r.size and traffic is not None:
                traffic.sent(replica_id, topic.name, index, r.size)
        if size:
            metrics.record_fetched(topic.name, buffers, size)
        topics.append(topic)
    out, total = encode_fetch_response(v, topics, throttle, 0, 0)
    # every version served (4+) opens with throttle_time_ms
    return RawResponse(out, total, flexible_header=v >= 12, throttle_offset=0)


def _exists(topics: Any, name: str, partition: int) -> bool:
    """Is `name`-`partition` a partition of the cluster (the metadata image)?"""
    info = topics.get(name)
    return info is not None and 0 <= partition < info.partitions
