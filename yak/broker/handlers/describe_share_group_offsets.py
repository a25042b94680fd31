"""DescribeShareGroupOffsets (KIP-932, API 90): a share group's start offset per share
partition, read from the share coordinator (here or on the broker that leads the key's
`__share_group_state` partition, through the persister), and its lag where this broker
leads the partition (high watermark - start offset - records already done above it; -1
elsewhere). A share partition never initialized answers start offset -1, as Kafka does.
`topics` null asks for every topic the group's members subscribe to. Policy in
yak/share/ (persister.py, coordinator.py)."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.broker.handlers._share import manager
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType
from yak.share.records import ACKNOWLEDGED, ARCHIVED, ShareKey

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "describe_share_group_offsets")
    share = manager(ctx)
    groups = []
    for g in request.groups:
        gid = g.group_id
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            groups.append(_group(mod, gid, (), ErrorCode.group_authorization_failed))
            continue
        if share is None or share.persister is None:
            groups.append(_group(mod, gid, (), ErrorCode.coordinator_not_available))
            continue
        wanted = ([(t.topic_name, tuple(t.partitions)) for t in g.topics]
                  if g.topics is not None else _subscribed(ctx, share, gid))
        topics = []
        for name, parts in wanted:
            info = ctx.broker.topics.get(name)
            if info is None or not ctx.authorized(AclOperation.DESCRIBE,
                                                  ResourceType.TOPIC, name):
                code = (ErrorCode.unknown_topic_or_partition if info is None
                        else ErrorCode.topic_authorization_failed)
                topics.append(build(mod.DescribeShareGroupOffsetsResponseTopic,
                                    topic_name=name, topic_id=None, partitions=tuple(
                                        _partition(mod, p, -1, -1, code) for p in parts)))
                continue
            out = []
            for p in parts:
                if not 0 <= p < info.partitions:
                    out.append(_partition(mod, p, -1, -1, ErrorCode.unknown_topic_or_partition))
                    continue
                state = await share.persister.read(ShareKey(gid, info.topic_id, p), -1)
                if state.error is not ErrorCode.none:
                    out.append(_partition(mod, p, -1, -1, state.error))
                    continue
                out.append(_partition(mod, p, state.start_offset,
                                      _lag(ctx, name, p, state.start_offset, state.batches),
                                      ErrorCode.none))
            topics.append(build(mod.DescribeShareGroupOffsetsResponseTopic, topic_name=name,
                                topic_id=info.topic_id, partitions=tuple(out)))
        groups.append(_group(mod, gid, tuple(topics), ErrorCode.none))
    return response(ctx, groups=tuple(groups))


def _subscribed(ctx: RequestContext, share: Any, group_id: str) -> list[tuple[str, tuple[int, ...]]]:
    g = share.groups.get(group_id)
    names = sorted({t for m in g.members.values() for t in m.subscribed}) if g else []
    out = []
    for name in names:
        info = ctx.broker.topics.get(name)
        if info is not None:
            out.append((name, tuple(range(info.partitions))))
    return out


def _lag(ctx: RequestContext, topic: str, partition: int, start: int,
         batches: list[tuple[int, int, int, int]]) -> int:
    p = ctx.broker.replica_manager.get_partition(topic, partition)
    if start < 0 or p is None or not p.is_leader:
        return -1
    done = sum(b - a + 1 for a, b, s, _ in batches if s in (ACKNOWLEDGED, ARCHIVED))
    return max(0, p.high_watermark - start - done)


def _partition(mod: Any, partition: int, start: int, lag: int, code: ErrorCode) -> Any:
    return build(mod.DescribeShareGroupOffsetsResponsePartition, partition_index=partition,
                 start_offset=start, leader_epoch=-1, lag=lag, error_code=code,
                 error_message=None if code is ErrorCode.none else code.name)


def _group(mod: Any, group_id: str, topics: tuple[Any, ...], code: ErrorCode) -> Any:
    return build(mod.DescribeShareGroupOffsetsResponseGroup, group_id=group_id,
                 topics=topics, error_code=code,
                 error_message=None if code is ErrorCode.none else code.name)
