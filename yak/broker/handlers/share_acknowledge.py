"""ShareAcknowledge (KIP-932): accept, release, reject (v2: renew) records a share group
member holds, without fetching. Epoch 0 is refused (a session is opened by ShareFetch);
-1 acknowledges and closes the share session. Topics merged by id; policy in yak/share/.
The acknowledgements are applied before the first await (the connection's order) and
are durable (the share coordinator, acks=all) before they are answered.
"""

from __future__ import annotations

import uuid
from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import require_group, response, response_module
from yak.broker.handlers._share import manager, node_endpoints, topic_name
from yak.protocol.kio_compat import ErrorCode, build, ms_to_timedelta
from yak.security.acl import AclOperation
from yak.share.session import FINAL_EPOCH, INITIAL_EPOCH, ShareSessionError

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    group_id = request.group_id or ""
    require_group(ctx, AclOperation.READ, group_id)
    share = manager(ctx)
    if share is None:
        return _top(ctx, ErrorCode.coordinator_not_available)
    # Not checked against the membership: a closing client leaves the group and then
    # sends its last acknowledgements (epoch -1), which must still count.
    member_id = request.member_id or ""
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return _top(ctx, ErrorCode.invalid_share_session_epoch,
                    "ShareAcknowledge cannot open a share session")
    try:
        share.sessions.advance(group_id, member_id, epoch)
    except ShareSessionError as e:
        return _top(ctx, e.code, str(e))
    acks: dict[tuple[uuid.UUID, int], list[tuple[int, int, tuple[int, ...]]]] = {}
    for t in request.topics:
        if t.topic_id is None:
            continue
        for p in t.partitions:
            acks.setdefault((t.topic_id, p.partition_index), []).extend(
                (b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                for b in p.acknowledgement_batches)
    mod = response_module(ctx, "share_acknowledge")
    by_topic: dict[uuid.UUID, list[Any]] = {}
    leaders: set[int] = set()
    codes: dict[tuple[uuid.UUID, int], ErrorCode] = {}
    names: dict[tuple[uuid.UUID, int], str | None] = {}
    for (tid, part), batches in acks.items():
        name = names[(tid, part)] = topic_name(ctx, tid)
        codes[(tid, part)] = (ErrorCode.unknown_topic_id if name is None
                              else share.acknowledge(group_id, member_id, name, part, batches))
    # Durable (the share coordinator, acks=all) before they are answered.
    keyed = {(n, k[1]): k for k, n in names.items() if n is not None}
    for tp, code in (await share.persist(group_id, keyed)).items():
        codes[keyed[tp]] = code
    for (tid, part) in acks:
        name, err = names[(tid, part)], codes[(tid, part)]
        p = ctx.broker.replica_manager.get_partition(name, part) if name is not None else None
        leader = (p.state.leader, p.leader_epoch) if p is not None else (-1, -1)
        leaders.add(leader[0])
        by_topic.setdefault(tid, []).append(build(
            mod.PartitionData, partition_index=part, error_code=err,
            error_message=None if err is ErrorCode.none else err.name,
            current_leader=build(mod.LeaderIdAndEpoch, leader_id=leader[0],
                                 leader_epoch=leader[1])))
    if epoch == FINAL_EPOCH:
        share.sessions.close(group_id, member_id)
        share.session_closed(group_id, member_id)
    return response(
        ctx, error_code=ErrorCode.none,
        acquisition_lock_timeout=ms_to_timedelta(share.lock_duration_ms(group_id)),
        responses=tuple(build(mod.ShareAcknowledgeTopicResponse, topic_id=t,
                              partitions=tuple(ps)) for t, ps in by_topic.items()),
        node_endpoints=node_endpoints(ctx, "share_acknowledge", leaders))


def _top(ctx: RequestContext, code: ErrorCode, message: str | None = None) -> Any:
    return response(ctx, error_code=code, error_message=message or code.name, responses=(),
                    node_endpoints=())
