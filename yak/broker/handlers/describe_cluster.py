"""DescribeCluster: cluster id, controller and brokers (AdminClient.describe_cluster).

The controller and brokers come from `broker.cluster` (a single Yak broker is its own
controller; in a cluster, the registered brokers and the holder of the controller key).
Authorized operations, when asked for, are the
cluster operations the caller's ACLs allow (all of them without an authorizer, as in
Kafka). Each broker's address is the one it advertises on the listener the request came in
on.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import (
    CLUSTER_NAME,
    CLUSTER_OPERATIONS,
    RequestContext,
    authorized_operations,
)
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import ErrorCode
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import ResourceType

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2
_UNSET_OPS = -2147483648


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("describe_cluster", ctx.api_version, "response")
    broker = ctx.broker
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    ops = _UNSET_OPS
    if request.include_cluster_authorized_operations:
        ops = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)
    brokers = []
    for node in broker.cluster.nodes():
        endpoint = node.endpoint(ctx.listener_name)  # of the listener asked on
        if endpoint is None:
            continue
        brokers.append(build(
            m.DescribeClusterBroker,
            broker_id=node.node_id,
            host=endpoint[0],
            port=endpoint[1],
            rack=node.rack,
            is_fenced=node.fenced,
        ))
    return build(
        m.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id=broker.cluster_id,
        controller_id=broker.cluster.controller_id(),
        brokers=tuple(brokers),
        cluster_authorized_operations=ops,
    )
