"""DescribeLogDirs: bytes on disk per partition in the broker's one log directory.

Tools use it for disk usage per topic (`kafka-log-dirs`). Yak has no replica moves
between directories, so there are no future replicas and the offset lag is 0.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import ErrorCode
from yak.protocol.kio_compat import build, schema_module

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 4


def partition_size(plog: Any) -> int:
    """Bytes of the partition's segments; from storage if it tracks it, else from disk."""
    size = getattr(plog, "size_in_bytes", None)
    if size is not None:
        return int(size() if callable(size) else size)
    directory = getattr(plog, "dir", None) or getattr(plog, "path", None)
    if directory is None:
        return 0
    total = 0
    for f in Path(directory).iterdir():
        if f.suffix == ".log":
            with contextlib.suppress(FileNotFoundError):  # deleted by retention meanwhile
                total += f.stat().st_size
    return total


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("describe_log_dirs", ctx.api_version, "response")
    broker = ctx.broker
    if request.topics is None:
        wanted = {t.name: range(t.partitions) for t in broker.topics.topics()}
    else:
        wanted = {t.topic: list(t.partitions) for t in request.topics}
    topics = []
    for name, parts in sorted(wanted.items()):
        partitions = []
        for p in parts:
            plog = broker.topics.partition_log(name, p)
            if plog is None:
                continue
            partitions.append(
                build(
                    m.DescribeLogDirsPartition,
                    partition_index=p,
                    partition_size=partition_size(plog),
                    offset_lag=0,
                    is_future_key=False,
                )
            )
        if partitions:
            topics.append(build(m.DescribeLogDirsTopic, name=name, partitions=tuple(partitions)))
    data_dir = Path(broker.config.data_dir).resolve()
    usage = shutil.disk_usage(data_dir)
    result = build(
        m.DescribeLogDirsResult,
        error_code=ErrorCode.none,
        log_dir=str(data_dir),
        topics=tuple(topics),
        total_bytes=usage.total,
        usable_bytes=usage.free,
    )
    return build(
        m.DescribeLogDirsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results=(result,),
    )
