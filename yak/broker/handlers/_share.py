"""Shared plumbing of the share-group handlers (not a handler: the registry skips `_`
modules): the share manager, topic ids to names, the leader endpoints ShareFetch and
ShareAcknowledge v1 carry. Policy is in yak/share/."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response_module
from yak.protocol.kio_compat import build

if TYPE_CHECKING:
    from yak.share.manager import ShareManager


def manager(ctx: RequestContext) -> ShareManager | None:
    return ctx.broker.share


def topic_name(ctx: RequestContext, topic_id: uuid.UUID | None) -> str | None:
    if topic_id is None:
        return None
    info = ctx.broker.topics.by_id(topic_id)
    return info.name if info is not None else None


def node_endpoints(ctx: RequestContext, api_name: str, node_ids: set[int]) -> tuple[Any, ...]:
    """The endpoints of the leaders named in the response (KIP-951 style), on the
    listener the request came in on."""
    mod = response_module(ctx, api_name)
    out = []
    for node_id in sorted(n for n in node_ids if n >= 0):
        node = ctx.broker.cluster.node(node_id)
        endpoint = node.endpoint(ctx.listener_name) if node is not None else None
        if endpoint is not None:
            out.append(build(mod.NodeEndpoint, node_id=node_id, host=endpoint[0],
                             port=endpoint[1], rack=node.rack))
    return tuple(out)
