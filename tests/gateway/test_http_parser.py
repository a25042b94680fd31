"""The HTTP gateway parses HTTP with httptools (C), never h11's pure-Python parser.

uvicorn's default ("auto") falls back to h11 when httptools is missing; the gateway asks
for httptools by name, so that fallback cannot happen silently. This runs the gateway's
HTTP server in-process (to see which protocol object serves the connection) in front of a
real broker, and makes a real REST call through it.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.conftest import YakBroker, free_port
from yak.gateway.embed import start_http
from yak.gateway.settings import GatewaySettings


def test_requests_are_parsed_by_httptools(broker: YakBroker) -> None:
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

    status, kinds, body = asyncio.run(run())
    assert status == 200 and body == "list"
    assert kinds == ["HttpToolsProtocol"]
