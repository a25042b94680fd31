"""`yak gateway`: the REST/WebSocket/console/metrics gateway on its own, for any cluster.

It is the same app `yak serve --http` embeds; here it reaches the cluster given by
`--bootstrap` over the Kafka protocol and runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Annotated

import typer


def gateway(
    bootstrap: Annotated[
        str, typer.Option("--bootstrap", help="HOST:PORT[,...] of the Kafka cluster.")
    ] = "127.0.0.1:9092",
    http: Annotated[
        str, typer.Option("--http", help="HOST:PORT to serve HTTP and WebSocket on.")
    ] = "127.0.0.1:8080",
    consumer_timeout_s: Annotated[
        float,
        typer.Option("--consumer-timeout", help="Seconds before an idle REST consumer expires."),
    ] = 300.0,
    request_timeout_s: Annotated[
        float, typer.Option("--request-timeout", help="Seconds before a cluster call fails.")
    ] = 10.0,
    max_body_bytes: Annotated[
        int, typer.Option("--max-body-bytes", help="Largest HTTP request body accepted.")
    ] = 8 * 1024 * 1024,
) -> None:
    """Run the HTTP gateway (REST Proxy v2, /ws, console, /metrics) against a cluster."""
    from yak.gateway.embed import start_http
    from yak.gateway.settings import GatewaySettings

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = GatewaySettings(bootstrap=bootstrap, consumer_instance_timeout_s=consumer_timeout_s,
                               max_body_bytes=max_body_bytes,
                               request_timeout_s=request_timeout_s)

    async def run() -> None:
        try:
            server = await start_http(http, settings)
        except (OSError, ValueError) as e:
            print(f"yak: error: cannot serve HTTP on {http}: {e}", file=sys.stderr, flush=True)
            raise typer.Exit(1) from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        host = http.rpartition(":")[0] or "127.0.0.1"
        print(f"Yak gateway ready on http://{host}:{server.port}/ (cluster {bootstrap})",
              flush=True)
        await stop.wait()
        await server.stop()

    try:
        import uvloop

        uvloop.run(run())
    except ImportError:  # pragma: no cover - uvloop is a dependency
        asyncio.run(run())
