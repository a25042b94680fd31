"""`yak gateway`: the gateway on its own, for any Kafka-compatible cluster.

HTTP (REST Proxy v2, /ws, console, /metrics; the same app `yak serve --http` embeds)
and/or gRPC (`yak.v1.Gateway`, `--grpc`), sharing one gateway core: one producer, one
admin client. It reaches the cluster given by `--bootstrap` over the Kafka protocol and
runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Annotated, Any

import typer

from yak.cli.common import client_security, secured

OFF = ("", "none", "off")


@secured
def gateway(
    bootstrap: Annotated[
        str, typer.Option("--bootstrap", help="HOST:PORT[,...] of the Kafka cluster.")
    ] = "127.0.0.1:9092",
    http: Annotated[
        str, typer.Option("--http", help="HOST:PORT to serve HTTP and WebSocket on; 'none' = off.")
    ] = "127.0.0.1:8080",
    grpc: Annotated[
        str, typer.Option("--grpc", help="HOST:PORT to serve gRPC (yak.v1.Gateway) on; "
                                         "'none' = off.")
    ] = "none",
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
    grpc_tls: Annotated[
        str | None,
        typer.Option("--grpc-tls", help="Serve gRPC over TLS: a .properties file with Kafka's "
                     "server settings ssl.keystore.type=PEM, ssl.keystore.location, and for "
                     "mTLS ssl.truststore.location and ssl.client.auth=required."),
    ] = None,
) -> None:
    """Run the gateway (HTTP: REST Proxy v2, /ws, console, /metrics; gRPC) against a cluster."""
    from yak.cli.common import fail
    from yak.gateway.settings import GatewaySettings, parse_hostport

    http_listen = None if http.lower() in OFF else http
    grpc_listen = None if grpc.lower() in OFF else grpc
    if http_listen is None and grpc_listen is None:
        fail("nothing to serve: --http and --grpc are both 'none'", 2)
    for flag, value in (("--http", http_listen), ("--grpc", grpc_listen)):
        if value is not None:
            try:
                parse_hostport(value)
            except ValueError as e:
                fail(f"{flag}: {e}", 2)
    credentials = None
    if grpc_tls is not None:
        if grpc_listen is None:
            fail("--grpc-tls needs --grpc", 2)
        from yak.config import ConfigError, read_config_file
        from yak.gateway.grpc_api.server import tls_credentials

        try:
            credentials = tls_credentials(read_config_file(grpc_tls))
        except ConfigError as e:
            fail(f"--grpc-tls {grpc_tls}: {e}", 2)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = GatewaySettings(bootstrap=bootstrap, consumer_instance_timeout_s=consumer_timeout_s,
                               max_body_bytes=max_body_bytes,
                               request_timeout_s=request_timeout_s,
                               security=client_security())

    async def run() -> None:
        from yak.gateway.core import GatewayCore
        from yak.gateway.embed import start_http

        core = GatewayCore(settings)
        servers: list[Any] = []
        where = []
        try:
            if http_listen is not None:
                try:
                    server = await start_http(http_listen, settings, core)
                except (OSError, ValueError) as e:
                    _fail(f"cannot serve HTTP on {http_listen}: {e}")
                servers.append(server)
                host = http_listen.rpartition(":")[0] or "127.0.0.1"
                where.append(f"http://{host}:{server.port}/")
            if grpc_listen is not None:
                from yak.gateway.grpc_api.server import start_grpc

                try:
                    gserver = await start_grpc(grpc_listen, core, credentials)
                except (OSError, ValueError) as e:
                    _fail(f"cannot serve gRPC on {grpc_listen}: {e}")
                servers.append(gserver)
                host = grpc_listen.rpartition(":")[0] or "127.0.0.1"
                where.append(f"grpc {host}:{gserver.port}")
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            print(f"Yak gateway ready on {', '.join(where)} (cluster {bootstrap})", flush=True)
            await stop.wait()
        finally:
            for s in reversed(servers):
                await s.stop()
            await core.close()

    try:
        import uvloop

        uvloop.run(run())
    except ImportError:  # pragma: no cover - uvloop is a dependency
        asyncio.run(run())


def _fail(message: str) -> None:
    print(f"yak: error: {message}", file=sys.stderr, flush=True)
    raise typer.Exit(1)
