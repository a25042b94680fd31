"""DescribeCluster: cluster id, controller and brokers (AdminClient.describe_cluster).

A single Yak broker is its own controller. Authorized operations, when asked for, are
every cluster operation: with no authorizer configured Kafka allows everything too.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import ErrorCode
from yak.protocol.kio_compat import build, schema_module

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2
# AclOperation codes valid on the CLUSTER resource: CREATE 5, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12,
# CREATE_TOKENS 13, DESCRIBE_TOKENS 14.
_CLUSTER_OPS = (5, 7, 8, 9, 10, 11, 12, 13, 14)
_UNSET_OPS = -2147483648


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("describe_cluster", ctx.api_version, "response")
    broker = ctx.broker
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    ops = _UNSET_OPS
    if request.include_cluster_authorized_operations:
        ops = sum(1 << op for op in _CLUSTER_OPS)
    endpoint = broker.endpoint(ctx.listener_name)  # of the listener asked on
    brokers = () if endpoint is None else (
        build(
            m.DescribeClusterBroker,
            broker_id=broker.node_id,
            host=endpoint[0],
            port=endpoint[1],
            rack=None,
            is_fenced=False,
        ),
    )
    return build(
        m.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=brokers,
        cluster_authorized_operations=ops,
    )
