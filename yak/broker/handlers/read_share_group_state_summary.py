"""ReadShareGroupStateSummary (KIP-932, an inter-broker API): a share partition's state
epoch, leader epoch and start offset without its batches (what DescribeShareGroupOffsets
needs). Policy in yak/share/coordinator.py."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._share import state_coordinator, state_requests, state_response
from yak.protocol.kio_compat import ErrorCode

API_KEY = 87
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = state_coordinator(ctx)
    results = []
    for tid, parts in state_requests(ctx, request):
        out = []
        for p, key, code in parts:
            fields: dict[str, object] = {"partition": p.partition, "state_epoch": 0,
                                         "leader_epoch": -1, "start_offset": -1}
            if key is not None and coordinator is not None:
                code = await coordinator.ensure_ready(key) or ErrorCode.none
                if code is ErrorCode.none:
                    code, st = coordinator.read(key, -1)
                    if st is not None:
                        fields.update(state_epoch=st.state_epoch,
                                      leader_epoch=st.leader_epoch,
                                      start_offset=st.start_offset)
            out.append(dict(fields, error_code=ErrorCode(code)))
        results.append((tid, out))
    return state_response(ctx, "read_share_group_state_summary", "ReadStateSummaryResult",
                          results)
