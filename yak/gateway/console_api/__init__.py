"""The JSON API behind the web console (`/api/...`), one module per console page.

It is shaped for the page rather than for REST Proxy compatibility: one call per view,
with every number the view shows (log start, log end, high watermark and size per
partition; lag per group partition), so the browser never fans out requests.
Errors use the same `{"error_code", "message"}` body as the REST Proxy API.

`router` includes the pages' routers; `yak.gateway.app` mounts it. What the pages
share (documented errors, the caller's cluster, internal topics, the broker list) is
`common.py`. No two pages' routes can match the same request, so the order below only
orders the OpenAPI document.
"""

from __future__ import annotations

from fastapi import APIRouter

from yak.gateway.console_api import (
    brokers,
    groups,
    messages,
    overview,
    quotas,
    reassignments,
    security,
    share_groups,
    topics,
    transactions,
)

router = APIRouter()
for _page in (overview, topics, messages, security, groups, share_groups, transactions, quotas,
              brokers, reassignments):
    router.include_router(_page.router)
