"""The HTTP gateway's two costs per request that no client can see: the HTTP parser and GC.

uvicorn's default ("auto") falls back to h11's pure-Python parser when httptools is
missing; the gateway asks for httptools by name, so that fallback cannot happen silently.
And the app, built on the first request, is frozen out of the garbage collector's full
collections (gc.freeze). This runs the gateway's HTTP server in-process (to see which
protocol object serves the connection and the collector's state) in front of a real broker,
and makes a real REST call through it.
"""

from __future__ import annotations

import asyncio
import gc

import httpx

from tests.conftest import YakBroker, free_port
from yak.gateway.embed import start_http
from yak.gateway.settings import GatewaySettings


def test_requests_are_parsed_by_httptools_and_the_app_is_frozen(broker: YakBroker) -> None:
    frozen_before = gc.get_freeze_count()

    async def run() -> tuple[int, list[str], str]:
        server = await start_http(f"127.0.0.1:{free_port()}",
                                  GatewaySettings(bootstrap=broker.bootstrap))
        try:
            url = f"http://127.0.0.1:{server.port}"
            async with httpx.AsyncClient(timeout=20) as client:
                r = await client.get(f"{url}/topics")
                # The keep-alive connection is still open: its protocol object is live.
                kinds = sorted(type(c).__name__ for c in server.server.server_state.connections)
            return r.status_code, kinds, type(r.json()).__name__
        finally:
            await asyncio.wait_for(server.stop(), 20)

    try:
        status, kinds, body = asyncio.run(run())
        frozen_after = gc.get_freeze_count()
    finally:
        gc.unfreeze()  # this process is pytest's: give the collector its objects back
    assert status == 200 and body == "list"
    assert kinds == ["HttpToolsProtocol"]
    assert frozen_after > frozen_before + 10_000  # the app and what it imported
