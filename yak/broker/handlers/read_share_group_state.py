"""ReadShareGroupState (KIP-932, an inter-broker API): a share-partition leader on another
broker reads a share partition's durable state from this broker's share coordinator.
A key with no state (never initialized, or deleted) is INVALID_REQUEST, as Kafka 4.1+
answers ("Read operation on uninitialized share partition not allowed": the group
coordinator initializes a share partition before its leader reads it); one initialized
with no start yet answers start offset -1 (the leader chooses it by
`share.auto.offset.reset`); a reader whose leader epoch is older than the one stored is
FENCED_LEADER_EPOCH. Policy in yak/share/coordinator.py."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response_module
from yak.broker.handlers._share import state_coordinator, state_requests, state_response
from yak.protocol.kio_compat import ErrorCode, build

API_KEY = 84
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "read_share_group_state")
    coordinator = state_coordinator(ctx)
    results = []
    for tid, parts in state_requests(ctx, request):
        out = []
        for p, key, code in parts:
            fields: dict[str, Any] = {"partition": p.partition, "state_epoch": 0,
                                      "start_offset": -1, "state_batches": ()}
            if key is not None and coordinator is not None:
                code = await coordinator.ensure_ready(key) or ErrorCode.none
                if code is ErrorCode.none:
                    code, st = await coordinator.read_state(key, p.leader_epoch)
                    if st is None and code is ErrorCode.none:
                        code = ErrorCode.invalid_request  # uninitialized
                    elif st is not None:
                        fields.update(state_epoch=st.state_epoch, start_offset=st.start_offset,
                                      state_batches=tuple(build(
                                          mod.StateBatch, first_offset=a, last_offset=b,
                                          delivery_state=s, delivery_count=c)
                                          for a, b, s, c in st.batches))
            out.append(dict(fields, error_code=code))
        results.append((tid, out))
    return state_response(ctx, "read_share_group_state", "ReadStateResult", results)
