"""ApiVersions: the first request of every client, answered from the handler registry.

Ranges are as wide as the handlers allow, with low minimums: old clients (kcat 1.7's
librdkafka 2.0.2) only switch features on when their preferred old versions fall in the
range. The v3+ response carries no top-level tagged fields (supported/finalized
features), because that librdkafka fails to parse them.
"""

from __future__ import annotations

import datetime
from typing import Any

from yak.broker import handlers
from yak.broker.context import RequestContext
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

_ZERO = datetime.timedelta(0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    mod = kio_compat.schema_module("api_versions", v, "response")
    keys = tuple(
        mod.ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(handlers.registry().values(), key=lambda s: s.api_key)
    )
    return kio_compat.build(
        mod.ApiVersionsResponse,
        error_code=ErrorCode.none,
        api_keys=keys,
        throttle_time=_ZERO,
    )
