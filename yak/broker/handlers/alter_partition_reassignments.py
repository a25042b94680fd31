"""AlterPartitionReassignments (API 45, KIP-455): start, replace or cancel (null replicas)
the move of partitions to new replica sets.

The rules and errors are `yak/cluster/reassignment.py`'s: the target and the
adding/removing replicas are written in the partition record in the metadata store, and
the controller completes the move once every target replica is in the ISR. The answer
comes once the record is written, not once the data has moved (Kafka's too).
INVALID_REPLICA_ASSIGNMENT (empty, duplicate or unregistered broker), INVALID_REPLICATION_
FACTOR (v1's allow_replication_factor_change false), NO_REASSIGNMENT_IN_PROGRESS,
UNKNOWN_TOPIC_OR_PARTITION per partition. Needs ALTER on the cluster (else every partition
and the top level answer CLUSTER_AUTHORIZATION_FAILED, as Kafka's).
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.cluster.reassignment import PartitionReassignments
from yak.errors import ErrorCode
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("alter_partition_reassignments", ctx.api_version, "response")
    allow_rf = bool(getattr(request, "allow_replication_factor_change", True))
    wanted = [(t.name, int(p.partition_index),
               None if p.replicas is None else tuple(int(r) for r in p.replicas))
              for t in request.topics for p in t.partitions]
    top, top_message = ErrorCode.none, None
    if not ctx.cluster_authorized(AclOperation.ALTER):
        top = ErrorCode.cluster_authorization_failed
        top_message = "Cluster authorization failed."
        results = {(t, p): (top, top_message) for t, p, _r in wanted}
    else:
        results = await PartitionReassignments(ctx.broker.topics.store).alter(wanted, allow_rf)
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(build(
            m.ReassignablePartitionResponse, partition_index=p, error_code=code,
            error_message=message))
    return build(
        m.AlterPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=allow_rf,
        error_code=top,
        error_message=top_message,
        responses=tuple(build(m.ReassignableTopicResponse, name=t, partitions=tuple(parts))
                        for t, parts in by_topic.items()),
    )
