"""`yak gateway`: the gateway on its own, for any Kafka-compatible cluster.

HTTP (REST Proxy v2, /ws, console, /metrics; the same app `yak serve --http` embeds)
and/or gRPC (`yak.v1.Gateway`, `--grpc`), sharing one gateway core: one producer, one
admin client. It reaches the cluster given by `--bootstrap` over the Kafka protocol and
runs until SIGTERM/SIGINT.

`--set remote.storage.uri=...` (and the keys, with the broker's setting names, else the
standard AWS variables): the store whose presigned segment URLs the gateway hands out
(`GET /tiered/v1/...`, yak/gateway/rest_tiered.py), as the gateway of `yak serve` does with
its broker's settings; so a gateway apart from the brokers can serve Spark's
`tiered.presign`. Only those settings are taken: the gateway does nothing else with them.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from yak.cli.common import client_security, secured

OFF = ("", "none", "off")


PARTITIONERS = ("default", "load_aware")  # yak.client.load_aware (issue 23)
# The broker settings `--set` takes: the store presigned segment URLs are signed with.
STORE_SETTINGS = ("remote.storage.uri", "remote.storage.access.key.id",
                  "remote.storage.secret.access.key")


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
    http_tls: Annotated[
        str | None,
        typer.Option("--http-tls", help="Serve HTTPS: a .properties file with Kafka's server "
                     "TLS settings (ssl.keystore.type=PEM, ssl.keystore.location; optionally "
                     "ssl.truststore.location and ssl.client.auth for client certificates)."),
    ] = None,
    http_auth: Annotated[
        str, typer.Option("--http-auth", help="none: callers act as the gateway; basic: HTTP "
                          "Basic credentials of a Kafka user, who acts as itself on the "
                          "cluster (its ACLs apply).")
    ] = "none",
    grpc_auth: Annotated[
        str, typer.Option("--grpc-auth", help="none, basic ('authorization: Basic ...' call "
                          "metadata of a Kafka user) or mtls (the client certificate's "
                          "principal; needs --grpc-tls with ssl.client.auth=required).")
    ] = "none",
    auth_mechanism: Annotated[
        str, typer.Option("--auth-mechanism", help="SASL mechanism users log in to the "
                          "cluster with (basic auth).")
    ] = "SCRAM-SHA-512",
    partitioner: Annotated[
        str, typer.Option("--partitioner", help="Records with neither key nor partition:"
                          " default (murmur2_random, as Java's) or load_aware (prefer"
                          " partitions whose leader acknowledges soonest).")
    ] = "default",
    set_: Annotated[
        list[str] | None,
        # Help text is rich markup: "[/PREFIX]" would read as a closing tag; escape() keeps it.
        typer.Option("--set", help=escape(
                     "remote.storage.uri=s3://BUCKET[/PREFIX]?endpoint=...&region=...,"
                     " remote.storage.access.key.id=..., remote.storage.secret.access.key=..."
                     " (repeatable; keys default to the AWS_* variables): the store to sign"
                     " presigned URLs of tiered segments with.")),
    ] = None,
) -> None:
    """Run the gateway (HTTP: REST Proxy v2, /ws, console, /metrics; gRPC) against a cluster."""
    from yak.cli.common import fail
    from yak.gateway.settings import GatewaySettings, parse_hostport

    if partitioner not in PARTITIONERS:
        fail(f"invalid --partitioner {partitioner!r}: expected default or load_aware", 2)
    tiered = _store_settings(set_ or [])

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
    from yak.config import ConfigError, read_config_file
    from yak.gateway import access

    try:
        http_auth, grpc_auth, auth_mechanism = access.check_modes(http_auth, grpc_auth,
                                                                  auth_mechanism)
    except ValueError as e:
        fail(str(e), 2)
    credentials = mapper = None
    if grpc_tls is not None:
        if grpc_listen is None:
            fail("--grpc-tls needs --grpc", 2)
        from yak.gateway.grpc_api.server import tls_credentials

        try:
            grpc_settings = read_config_file(grpc_tls)
            credentials = tls_credentials(grpc_settings)
            if grpc_auth == "mtls":
                access.require_client_certificates(grpc_settings)
                mapper = access.principal_mapper(grpc_settings)
        except (ConfigError, ValueError) as e:
            fail(f"--grpc-tls {grpc_tls}: {e}", 2)
    elif grpc_auth == "mtls":
        fail("--grpc-auth mtls needs --grpc-tls (with ssl.client.auth=required)", 2)
    http_ssl = None
    if http_tls is not None:
        if http_listen is None:
            fail("--http-tls needs --http", 2)
        try:
            http_ssl = access.server_tls(read_config_file(http_tls))
        except (ConfigError, ValueError, OSError) as e:
            fail(f"--http-tls {http_tls}: {e}", 2)
    user_login = None
    if "basic" in (http_auth, grpc_auth):
        try:
            user_login = access.gateway_login(bootstrap, client_security(), auth_mechanism)
        except ValueError as e:
            fail(str(e), 2)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = GatewaySettings(bootstrap=bootstrap, consumer_instance_timeout_s=consumer_timeout_s,
                               max_body_bytes=max_body_bytes,
                               request_timeout_s=request_timeout_s,
                               security=client_security(), user_login=user_login,
                               http_auth=http_auth, http_ssl=http_ssl, grpc_auth=grpc_auth,
                               principal_mapper=mapper, partitioner=partitioner,
                               tiered=tiered)

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
                where.append(f"{'https' if http_ssl else 'http'}://{host}:{server.port}/")
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


def _store_settings(items: list[str]) -> Any:
    """`--set` KEY=VALUE items as a `TieredConfig` naming the store to presign with (None
    without any); exit 2 with one line for a key that is not one of `STORE_SETTINGS`, a
    bad URI, keys without a URI, or a store that cannot presign (not s3://)."""
    from yak.cli.common import fail

    if not items:
        return None
    raw: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            fail(f"--set {item!r}: expected KEY=VALUE", 2)
        if key not in STORE_SETTINGS:
            fail(f"--set {key}: yak gateway takes only {', '.join(STORE_SETTINGS)} (the"
                 " store presigned segment URLs are signed with)", 2)
        raw[key] = value.strip()
    from yak.settings import ConfigError
    from yak.tiered.config import TieredConfig
    from yak.tiered.store import parse_uri

    try:
        cfg = TieredConfig.from_settings(raw)
    except ConfigError as e:
        fail(f"--set: {e}", 2)
    if not cfg.uri:
        fail("--set remote.storage.access.key.id/secret.access.key need"
             " remote.storage.uri", 2)
    if parse_uri(cfg.uri).scheme != "s3":
        fail(f"--set remote.storage.uri={cfg.uri}: presigned URLs need an s3:// store", 2)
    if bool(cfg.access_key_id) != bool(cfg.secret_access_key):
        fail("--set remote.storage.access.key.id and remote.storage.secret.access.key go"
             " together", 2)
    return cfg


def _fail(message: str) -> None:
    print(f"yak: error: {message}", file=sys.stderr, flush=True)
    raise typer.Exit(1)
