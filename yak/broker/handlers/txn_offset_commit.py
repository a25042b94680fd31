"""TxnOffsetCommit: a consumer group's offsets, committed as part of a transaction.

The group coordinator writes them as a transactional batch of the producer to the group's
`__consumer_offsets` partition and keeps them pending (invisible to OffsetFetch) until the
transaction's marker arrives there: consume-transform-produce commits its input position
and its output together or not at all. KIP-447: the member id and generation (v3+) are
checked, so a zombie instance from an old generation is fenced (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID). Before writing, the group's partition must be in
the producer's ongoing transaction (AddOffsetsToTxn came first; KIP-890 part 1), else the
commit could hang outside any transaction. Kafka's checks: WRITE on the transactional id,
READ on the group and on each topic. v5 belongs to transaction version 2 (not offered).
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module, topic_partition_error
from yak.broker.handlers._txn import coordinator_or_error, may_write_txn_id, wire_error
from yak.group.coordinator import OffsetToCommit
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType
from yak.txn.coordinator import OFFSETS_TOPIC, produce_verification_error

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "txn_offset_commit")
    wanted = [(t.name, p) for t in request.topics for p in t.partitions]
    codes: dict[tuple[str, int], ErrorCode] = {}
    txn_id, group_id = request.transactional_id, request.group_id
    pid, epoch = int(request.producer_id), int(request.producer_epoch)
    error: ErrorCode | None = None
    group = ctx.broker.group_coordinator
    if not may_write_txn_id(ctx, txn_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif not ctx.authorized(AclOperation.READ, ResourceType.GROUP, group_id):
        error = ErrorCode.group_authorization_failed
    elif group is None:
        error = ErrorCode.coordinator_not_available
    else:
        offsets_tp = (OFFSETS_TOPIC, group.partition_for(group_id))
        locator = ctx.broker.coordinators
        remote = locator.remote_transaction_coordinator(txn_id) if locator else None
        if remote is not None:  # a cluster: the transaction's coordinator is another broker
            assert locator is not None
            verified = await locator.verify_remote(remote, txn_id, pid, epoch, *offsets_tp)
            if verified is not ErrorCode.none:
                error = produce_verification_error(verified)
        else:
            coord = await coordinator_or_error(ctx)
            if isinstance(coord, ErrorCode):
                error = coord
            else:
                verified = coord.verify_partitions(txn_id, pid, epoch, [offsets_tp])[offsets_tp]
                if verified is not ErrorCode.none:
                    error = produce_verification_error(verified)
    if error is not None:
        codes = {(t, p.partition_index): wire_error(ctx, error) for t, p in wanted}
    else:
        assert group is not None
        todo: list[OffsetToCommit] = []
        for topic, p in wanted:
            key = (topic, p.partition_index)
            if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, topic):
                codes[key] = ErrorCode.topic_authorization_failed
                continue
            bad = topic_partition_error(ctx, topic, p.partition_index)
            if bad is not None:
                codes[key] = bad
                continue
            todo.append(OffsetToCommit(topic, p.partition_index, p.committed_offset,
                                       getattr(p, "committed_leader_epoch", -1),
                                       p.committed_metadata))
        results = await group.txn_commit_offsets(
            group_id, pid, epoch, int(getattr(request, "generation_id", -1)),
            getattr(request, "member_id", "") or "", getattr(request, "group_instance_id", None),
            todo)
        for o, code in zip(todo, results, strict=True):
            codes[(o.topic, o.partition)] = wire_error(ctx, code)
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append(
            build(mod.TxnOffsetCommitResponsePartition, partition_index=p, error_code=code))
    return response(ctx, topics=tuple(
        build(mod.TxnOffsetCommitResponseTopic, name=t, partitions=tuple(ps))
        for t, ps in by_topic.items()))
