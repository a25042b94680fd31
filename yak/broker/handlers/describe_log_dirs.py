"""DescribeLogDirs: bytes on disk per partition in the broker's one log directory.

Tools use it for disk usage per topic (`kafka-log-dirs`). Yak has no replica moves
between directories, so there are no future replicas and the offset lag is 0.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import ErrorCode
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("describe_log_dirs", ctx.api_version, "response")
    if not ctx.cluster_authorized(AclOperation.DESCRIBE):
        # Kafka: nothing is described; v3+ says why.
        return build(m.DescribeLogDirsResponse, throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed, results=())
    wanted = (None if request.topics is None
              else {t.topic: list(t.partitions) for t in request.topics})
    desc = ctx.broker.replica_manager.describe_log_dirs(wanted)
    topics = [
        build(
            m.DescribeLogDirsTopic,
            name=name,
            partitions=tuple(
                build(m.DescribeLogDirsPartition, partition_index=p, partition_size=size,
                      offset_lag=0, is_future_key=False)
                for p, size in parts
            ),
        )
        for name, parts in sorted(desc.topics.items())
    ]
    result = build(
        m.DescribeLogDirsResult,
        error_code=ErrorCode.none,
        log_dir=desc.path,
        topics=tuple(topics),
        total_bytes=desc.total_bytes,
        usable_bytes=desc.usable_bytes,
    )
    return build(
        m.DescribeLogDirsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results=(result,),
    )
