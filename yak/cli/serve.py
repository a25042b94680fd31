"""`yak serve`: run one broker in the foreground, with the HTTP gateway beside it.

This is where the broker and the gateway are composed: the broker (`yak.broker.server`)
knows nothing of HTTP, and the gateway reaches the broker over its Kafka listener like any
client, plus the broker's metrics object, handed over here for `/metrics`.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape


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
        # Help text is rich markup: "[/NAME]" would read as a closing tag; escape() keeps it.
        typer.Option("--metadata", help="Metadata store (metadata.store): local, or "
                     + escape("etcd://HOST:PORT[,HOST:PORT...][/NAME]") + " to join a cluster."),
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
    http_tls: Annotated[
        bool,
        typer.Option("--http-tls", help="Serve HTTPS with the broker's own ssl.keystore.* (and "
                     "for client certificates ssl.truststore.*, ssl.client.auth) settings."),
    ] = False,
    http_auth: Annotated[
        str, typer.Option("--http-auth", help="none: callers act as the broker; basic: HTTP "
                          "Basic credentials of a Kafka user, who acts as itself (its ACLs "
                          "apply).")
    ] = "none",
    grpc_auth: Annotated[
        str, typer.Option("--grpc-auth", help="none, basic ('authorization: Basic ...' call "
                          "metadata) or mtls (the client certificate's principal; needs "
                          "--grpc-tls and ssl.client.auth=required).")
    ] = "none",
    auth_mechanism: Annotated[
        str, typer.Option("--auth-mechanism", help="SASL mechanism users log in with (basic "
                          "auth), on a SASL listener of this broker that enables it.")
    ] = "SCRAM-SHA-512",
    partitioner: Annotated[
        str, typer.Option("--gateway-partitioner", help="The gateway's partitioner for records"
                          " with neither key nor partition: default (murmur2_random) or"
                          " load_aware (the brokers' published load and each leader's"
                          " acknowledgements).")
    ] = "default",
) -> None:
    """Run a Yak broker until SIGTERM/SIGINT."""
    from yak.broker.server import serve as run
    from yak.gateway.settings import parse_hostport

    http_listen = None if http.lower() in ("", "none", "off") else http
    grpc_listen = None if grpc.lower() in ("", "none", "off") else grpc
    for flag, value in (("--http", http_listen), ("--grpc", grpc_listen)):
        if value is not None:
            try:
                parse_hostport(value)
            except ValueError as e:
                fail(f"{flag}: {e}", 2)
    from yak.gateway.access import check_modes

    try:
        access = dict(zip(("http_auth", "grpc_auth", "mechanism"),
                          check_modes(http_auth, grpc_auth, auth_mechanism), strict=True))
    except ValueError as e:
        fail(str(e), 2)
    if grpc_auth.lower() == "mtls" and not grpc_tls:
        fail("--grpc-auth mtls needs --grpc-tls (and ssl.client.auth=required)", 2)
    access["http_tls"] = http_tls
    if partitioner not in ("default", "load_aware"):
        fail(f"invalid --gateway-partitioner {partitioner!r}: expected default or load_aware", 2)
    access["partitioner"] = partitioner
    overrides = (*([f"metadata.store={metadata}"] if metadata else []), *(set_ or ()))
    _check_data_dir(data_dir, listen, advertised_listener, config, overrides)
    # Left unset, a flag does not override the config file; BrokerConfig has the defaults.
    code = run(
        data_dir=data_dir,
        listen=listen,
        advertised_listener=advertised_listener,
        config_file=config,
        # --metadata is the setting metadata.store; an explicit --set still wins.
        overrides=overrides,
        companions=([_gateway(http_listen, grpc_listen, grpc_tls, access)]
                    if http_listen or grpc_listen else []),
    )
    if code:  # serve() already printed the one-line reason
        raise typer.Exit(code)


def _check_data_dir(data_dir: str | None, listen: str | None, advertised: str | None,
                    config: str | None, overrides: tuple[str, ...]) -> None:
    """A data directory (log.dirs) that is, or lies under, a file: one line, exit 2.

    Settings that do not load are left to the broker, which names the bad key."""
    from yak.config import BrokerConfig

    try:
        path = BrokerConfig.load(data_dir=data_dir, listen=listen, advertised_listener=advertised,
                                 config_file=config, overrides=overrides,
                                 warn=lambda _message: None).data_dir
    except Exception:  # noqa: BLE001 - the broker reports it with the key's name
        return
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                where = "" if p == path else f" (in data directory {str(path)!r})"
                fail(f"data directory (log.dirs): {str(p)!r} is not a directory{where}", 2)
            return


def fail(message: str, exit_code: int = 1) -> NoReturn:
    """The CLI's one-line failure (`yak.cli.common.fail`), imported only when it happens:
    yak.cli.common loads confluent-kafka, which a broker's start never needs (issue 27)."""
    from yak.cli.common import fail as cli_fail

    cli_fail(message, exit_code)


def _gateway(listen: str | None, grpc: str | None = None, grpc_tls: bool = False,
             access: dict[str, Any] | None = None) -> Any:
    """The embedded gateway as a companion of the broker: started once the broker listens,
    stopped before it (REST, WebSocket, console and `/metrics` on `listen`; gRPC on `grpc`).

    `access`: HTTPS and who callers are (yak.gateway.access). A part that cannot be set up
    as asked is not started (never served with less security than asked); the broker
    says why on stderr and keeps serving Kafka clients."""
    access = access or {}

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
        options, listen_at = _access_options(running, access, grpc_at is not None, listen)
        if options is None:
            grpc_at = None
        server = await start_embedded(listen_at, running.bootstrap, running.broker.metrics,
                                      grpc=grpc_at, security=security,
                                      grpc_credentials=credentials, **(options or {}))
        return None if server is None else server.stop

    return start


def _access_options(running: Any, access: dict[str, Any], grpc_on: bool,
                    listen: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """(GatewaySettings options, the HTTP address to serve or None) from the broker's own
    settings; (None, None) when what was asked cannot be set up (said on stderr)."""
    from dataclasses import asdict

    from yak.gateway import access as gw_access
    from yak.settings import ConfigError

    raw = running.broker.config.raw
    http_auth = access.get("http_auth", "none")
    grpc_auth = access.get("grpc_auth", "none") if grpc_on else "none"
    topics = running.broker.topics
    options: dict[str, Any] = {
        "http_auth": http_auth, "grpc_auth": grpc_auth,
        "partitioner": access.get("partitioner", "default"),
        # The brokers' published load, from this broker's image (yak.cluster.broker_load):
        # node id -> the report's fields and its score, for the console and load_aware.
        "broker_loads": lambda: {n: {**asdict(r), "score": r.score}
                                 for n, r in topics.broker_loads().items()}}
    try:
        # The broker's remote.storage.*: the store that signs presigned URLs (rest_tiered).
        from yak.tiered.config import TieredConfig

        options["tiered"] = TieredConfig.from_settings(raw)
        if access.get("http_tls") and listen is not None:
            options["http_ssl"] = gw_access.server_tls(raw)
        if grpc_auth == "mtls":
            gw_access.require_client_certificates(raw)
            options["principal_mapper"] = gw_access.principal_mapper(raw)
        if "basic" in (http_auth, grpc_auth):
            options["user_login"] = gw_access.broker_login(
                raw, running.broker.security, running.listener_bootstrap,
                access.get("mechanism", gw_access.DEFAULT_MECHANISM))
    except (ConfigError, ValueError, OSError) as e:
        print(f"yak: warning: gateway not started: {e}", file=sys.stderr, flush=True)
        return None, None
    return options, listen
