"""ListPartitionReassignments (API 46, KIP-455): the partitions being moved, each with its
replica set (target and original together), adding and removing replicas, read from the
metadata image (`yak/cluster/reassignment.py`). Null topics list every moving partition;
unknown topics and partitions are left out, as Kafka does. Needs DESCRIBE on the cluster.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.cluster.reassignment import PartitionReassignments
from yak.errors import ErrorCode
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("list_partition_reassignments", ctx.api_version, "response")
    if not ctx.cluster_authorized(AclOperation.DESCRIBE):
        return build(m.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed,
                     error_message="Cluster authorization failed.", topics=())
    wanted = None if request.topics is None else [
        (t.name, tuple(int(p) for p in t.partition_indexes)) for t in request.topics]
    by_topic: dict[str, list[Any]] = {}
    for r in PartitionReassignments(ctx.broker.topics.store).list(wanted):
        by_topic.setdefault(r.topic, []).append(build(
            m.OngoingPartitionReassignment, partition_index=r.partition,
            replicas=r.replicas, adding_replicas=r.adding_replicas,
            removing_replicas=r.removing_replicas))
    return build(
        m.ListPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(build(m.OngoingTopicReassignment, name=t, partitions=tuple(parts))
                     for t, parts in by_topic.items()),
    )
