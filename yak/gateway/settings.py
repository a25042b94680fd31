"""Gateway settings, importable without FastAPI (`yak serve` reads them at start-up)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_INSTANCE_TIMEOUT_S = 300.0


@dataclass
class GatewaySettings:
    bootstrap: str
    embedded: bool = False
    # The embedded broker's metrics object (`yak.broker.metrics.BrokerMetrics`: its own
    # registry and totals), handed over by `yak serve`; None for a standalone gateway.
    broker_metrics: Any = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    consumer_instance_timeout_s: float = DEFAULT_INSTANCE_TIMEOUT_S
    metrics_interval_s: float = 5.0
    request_timeout_s: float = 10.0
    # How the gateway's Kafka clients reach a secured cluster
    # (`yak.security.client.ClientSecurity`: TLS, SASL); None: PLAINTEXT.
    security: Any = None
    # Callers (see yak.gateway.core.callers): how user names and passwords become Kafka
    # logins (`UserLogin`: bootstrap, SASL mechanism, TLS); None: nobody is logged in.
    user_login: Any = None
    # "none": every HTTP caller acts as the gateway; "basic": HTTP Basic credentials,
    # each user acting as itself on the cluster (needs `user_login`).
    http_auth: str = "none"
    # HTTPS: the server's ssl.SSLContext (built from Kafka's ssl.* server settings); None: HTTP.
    http_ssl: Any = None
    # gRPC callers: "none" (act as the gateway), "basic" (`authorization: Basic ...` call
    # metadata, logged in like HTTP users) or "mtls" (the client certificate's principal).
    grpc_auth: str = "none"
    # ssl.principal.mapping.rules for mTLS callers (`yak.security.tls.SslPrincipalMapper`).
    principal_mapper: Any = None
    # Records with neither key nor partition: "default" (librdkafka's murmur2_random, as
    # Java's) or "load_aware" (yak.client.load_aware, issue 23).
    partitioner: str = "default"
    # () -> {node id: its published load report's fields and "score" (0..1)}: `yak serve`
    # reads its broker's image (yak.cluster.broker_load), for the console and load_aware;
    # None (a standalone gateway): the producer's own observations only.
    broker_loads: Any = None
    # The broker's tiered-storage settings (`yak.tiered.config.TieredConfig`), handed over by
    # `yak serve`: the store that signs presigned segment URLs (rest_tiered.py); None (a
    # standalone gateway): none handed out.
    tiered: Any = None


def parse_hostport(value: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """HOST:PORT (or PORT) -> (host, port); ValueError names the bad value."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = default_host, value
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return (host.strip("[]") or default_host), int(port)
