"""WriteShareGroupState (KIP-932, an inter-broker API): a share-partition leader on another
broker writes a share partition's changed state batches to this broker's share
coordinator; answered once the record is durable (acks=all). Each partition's write is
submitted before the handler's first await on it; Yak's leaders send one write of a
share partition at a time (`ShareManager._flush`), so writes of one key arrive in
order. Policy in yak/share/coordinator.py."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._share import state_coordinator, state_requests, state_response
from yak.protocol.kio_compat import ErrorCode

API_KEY = 85
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = state_coordinator(ctx)
    results = []
    for tid, parts in state_requests(ctx, request):
        out = []
        for p, key, code in parts:
            if key is not None and coordinator is not None:
                code = await coordinator.write(
                    key, p.state_epoch, p.leader_epoch, p.start_offset,
                    [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                     for b in p.state_batches])
            out.append({"partition": p.partition, "error_code": ErrorCode(code)})
        results.append((tid, out))
    return state_response(ctx, "write_share_group_state", "WriteStateResult", results)
