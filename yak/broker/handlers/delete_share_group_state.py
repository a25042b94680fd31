"""DeleteShareGroupState (KIP-932, an inter-broker API): tombstones for a share
partition's state records, durable before it is answered. This broker's share
partitions of the keys are dropped first, on any broker: a group delete sends it to the
share-partition leaders too (which answer NOT_COORDINATOR for keys they do not
coordinate), so none keeps a window of the deleted group. Policy in
yak/share/coordinator.py and yak/share/deletion.py."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._share import (
    manager,
    state_coordinator,
    state_requests,
    state_response,
)
from yak.protocol.kio_compat import ErrorCode
from yak.share.deletion import forget_windows

API_KEY = 86
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = state_coordinator(ctx)
    share = manager(ctx)
    requested = state_requests(ctx, request)
    if share is not None:
        forget_windows(share, [key for _, parts in requested for _, key, _ in parts
                               if key is not None])
    results = []
    for tid, parts in requested:
        out = []
        for p, key, code in parts:
            if key is not None and coordinator is not None:
                code = coordinator.runtime.shard_error(coordinator.partition_for(key)) \
                    or await coordinator.delete(key)
            out.append({"partition": p.partition, "error_code": ErrorCode(code)})
        results.append((tid, out))
    return state_response(ctx, "delete_share_group_state", "DeleteStateResult", results)
