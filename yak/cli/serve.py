"""`yak serve`: run one broker in the foreground, with the HTTP gateway beside it.

This is where the broker and the gateway are composed: the broker (`yak.broker.server`)
knows nothing of HTTP, and the gateway reaches the broker over its Kafka listener like any
client, plus the broker's metrics object, handed over here for `/metrics`.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer


def serve(
    data_dir: Annotated[
        str | None,
        typer.Option("--data-dir", help="Data directory (log.dirs). [default: ./yak-data]"),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen", help="HOST:PORT to accept on (listeners). [default: 127.0.0.1:9092]"
        ),
    ] = None,
    advertised_listener: Annotated[
        str | None,
        typer.Option(
            "--advertised-listener",
            help="HOST:PORT clients are told to use (advertised.listeners). [default: --listen]",
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option("--config", help="Kafka-style .properties or .toml settings file."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Setting KEY=VALUE with Kafka's names; repeatable; wins."),
    ] = None,
    metadata: Annotated[
        str | None,
        typer.Option("--metadata", help="Metadata store (metadata.store): local, or"
                     " etcd://HOST:PORT[,HOST:PORT...][/NAME] to join a cluster."),
    ] = None,
    http: Annotated[
        str,
        typer.Option("--http", help="HOST:PORT for REST, WebSocket, console, /metrics; 'none' = off."),
    ] = "127.0.0.1:8080",
    grpc: Annotated[
        str,
        typer.Option("--grpc", help="HOST:PORT for the gRPC gateway (yak.v1.Gateway); "
                                    "'none' = off."),
    ] = "none",
    grpc_tls: Annotated[
        bool,
        typer.Option("--grpc-tls", help="Serve gRPC over TLS with the broker's own ssl.keystore.*"
                     " (and, for mTLS, ssl.truststore.* and ssl.client.auth) settings."),
    ] = False,
) -> None:
    """Run a Yak broker until SIGTERM/SIGINT."""
    from yak.broker.server import serve as run
    from yak.cli.common import fail
    from yak.gateway.settings import parse_hostport

    http_listen = None if http.lower() in ("", "none", "off") else http
    grpc_listen = None if grpc.lower() in ("", "none", "off") else grpc
    for flag, value in (("--http", http_listen), ("--grpc", grpc_listen)):
        if value is not None:
            try:
                parse_hostport(value)
            except ValueError as e:
                fail(f"{flag}: {e}", 2)
    # Left unset, a flag does not override the config file; BrokerConfig has the defaults.
    code = run(
        data_dir=data_dir,
        listen=listen,
        advertised_listener=advertised_listener,
        config_file=config,
        # --metadata is the setting metadata.store; an explicit --set still wins.
        overrides=(*([f"metadata.store={metadata}"] if metadata else []), *(set_ or ())),
        companions=([_gateway(http_listen, grpc_listen, grpc_tls)]
                    if http_listen or grpc_listen else []),
    )
    if code:  # serve() already printed the one-line reason
        raise typer.Exit(code)


def _gateway(listen: str | None, grpc: str | None = None, grpc_tls: bool = False) -> Any:
    """The embedded gateway as a companion of the broker: started once the broker listens,
    stopped before it (REST, WebSocket, console and `/metrics` on `listen`; gRPC on `grpc`)."""

    async def start(running: Any) -> Any:
        from yak.gateway.embed import start_embedded
        from yak.security.client import ClientSecurity

        # The gateway reaches the broker like any client, on the inter-broker listener and
        # with the broker's own inter-broker credentials (Kafka's convention).
        try:
            security = ClientSecurity.for_inter_broker(running.broker.config.raw,
                                                       running.broker.security.listeners)
        except ValueError as e:
            print(f"yak: warning: gateway not started: {e}", file=sys.stderr, flush=True)
            return None
        credentials, grpc_at = None, grpc
        if grpc_at is not None and grpc_tls:
            from yak.gateway.grpc_api.server import tls_credentials
            from yak.settings import ConfigError

            try:
                credentials = tls_credentials(running.broker.config.raw)
            except ConfigError as e:
                print(f"yak: warning: gRPC gateway not started: --grpc-tls: {e}",
                      file=sys.stderr, flush=True)
                grpc_at = None
        server = await start_embedded(listen, running.bootstrap, running.broker.metrics,
                                      grpc=grpc_at, security=security,
                                      grpc_credentials=credentials)
        return None if server is None else server.stop

    return start
