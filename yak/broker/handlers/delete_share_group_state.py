"""DeleteShareGroupState (KIP-932, an inter-broker API): tombstones for a share
partition's state records, durable before it is answered. Policy in
yak/share/coordinator.py."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._share import state_coordinator, state_requests, state_response
from yak.protocol.kio_compat import ErrorCode

API_KEY = 86
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = state_coordinator(ctx)
    results = []
    for tid, parts in state_requests(ctx, request):
        out = []
        for p, key, code in parts:
            if key is not None and coordinator is not None:
                code = coordinator.runtime.shard_error(coordinator.partition_for(key)) \
                    or await coordinator.delete(key)
            out.append({"partition": p.partition, "error_code": ErrorCode(code)})
        results.append((tid, out))
    return state_response(ctx, "delete_share_group_state", "DeleteStateResult", results)
