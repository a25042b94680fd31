"""ElectLeaders (API 43): move partitions to their preferred replica, or elect a leader
for leaderless ones from outside the ISR (unclean), on an admin's request.

v0 asks for preferred elections only; v1+ name the type (0 PREFERRED, 1 UNCLEAN). Null
partitions mean every partition, and then only the elections that happened or failed are
answered (ELECTION_NOT_NEEDED is left out, as Kafka does). The rules and error codes
(ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE) are
the topic manager's (`yak/cluster/quorum_controller.py: elect`); a preferred replica still
catching up is not in the ISR, so it is never elected. Needs ALTER on the cluster.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import ErrorCode
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

_PREFERRED = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("elect_leaders", ctx.api_version, "response")
    election_type = int(getattr(request, "election_type", _PREFERRED))
    wanted = None if request.topic_partitions is None else [
        (t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
    if not ctx.cluster_authorized(AclOperation.ALTER):
        code, message = ErrorCode.cluster_authorization_failed, None
        results = {tp: (code, message) for tp in wanted or ()}
        top = code
    elif election_type not in (0, 1):
        results = {tp: (ErrorCode.invalid_request, f"election type {election_type}")
                   for tp in wanted or ()}
        top = ErrorCode.none
    else:
        results = await ctx.broker.topics.elect_leaders(election_type, wanted)
        top = ErrorCode.none
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(build(
            m.PartitionResult, partition_id=p, error_code=code, error_message=message))
    return build(
        m.ElectLeadersResponse,
        throttle_time=NO_THROTTLE,
        error_code=top,
        replica_election_results=tuple(
            build(m.ReplicaElectionResult, topic=t, partition_result=tuple(parts))
            for t, parts in by_topic.items()),
    )
