"""Serve `yak.v1.Gateway` on grpc.aio, with server reflection and the health service.

It runs on the caller's event loop (the broker's in `yak serve --grpc`, its own in
`yak gateway --grpc`) and shares the caller's gateway core with the HTTP gateway.

Reflection (v1alpha, what grpcio-reflection serves) lets grpcurl and generic clients
discover the service without the .proto; the health service answers SERVING for `""`
and `yak.v1.Gateway` while the cluster answers a metadata request (checked every
`HEALTH_INTERVAL_S`), NOT_SERVING otherwise.

Security (issue 13) plugs in here: `credentials` (grpc.ssl_server_credentials, with
client certificates for mTLS) serves TLS; mapping call metadata or the peer certificate
to a Kafka principal belongs in a server interceptor built next to the servicer, and the
principal's Kafka clients in `ClusterClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from yak.gateway.core import GatewayCore
from yak.gateway.grpc_api import gateway_pb2_grpc as pb_grpc
from yak.gateway.grpc_api.service import SERVICE_NAME, GatewayService

log = logging.getLogger(__name__)

HEALTH_INTERVAL_S = 3.0
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
GRACE_S = 3.0

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _hostport(listen: str) -> str:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    return f"{host or '127.0.0.1'}:{port}"


class GrpcServer:
    """A started gRPC server; `stop()` drains calls for a few seconds, then cancels."""

    def __init__(self, server: grpc.aio.Server, port: int, health: HealthServicer,
                 core: GatewayCore) -> None:
        self.server = server
        self.port = port
        self.health = health
        self.core = core
        self._health_task: asyncio.Task[None] | None = None

    async def check_health(self) -> bool:
        try:
            await self.core.cluster.ping()
            up = True
        except Exception:  # ClusterError, or anything a dead cluster throws
            up = False
        status = _SERVING if up else _NOT_SERVING
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)
        return up

    async def _health_loop(self) -> None:
        while True:
            try:
                await self.check_health()
            except Exception:
                log.exception("gRPC health check failed")
            await asyncio.sleep(HEALTH_INTERVAL_S)

    def start_health(self) -> None:
        self._health_task = asyncio.get_running_loop().create_task(self._health_loop())

    async def stop(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        with contextlib.suppress(Exception):
            await self.health.enter_graceful_shutdown()
        await self.server.stop(GRACE_S)


def tls_credentials(settings: dict[str, str]) -> grpc.ServerCredentials:
    """TLS for the gRPC port from Kafka's server settings (`ssl.keystore.type=PEM`,
    `ssl.keystore.location`, `ssl.truststore.location`, `ssl.client.auth`): the same
    files and rules as a broker listener. Raises ConfigError naming the key."""
    from yak.security.tls import server_pem_material

    key, chain, client_ca, required = server_pem_material(settings)
    return grpc.ssl_server_credentials([(key, chain)], root_certificates=client_ca,
                                       require_client_auth=required)


async def start_grpc(listen: str, core: GatewayCore,
                     credentials: grpc.ServerCredentials | None = None) -> GrpcServer:
    """Bind `listen` (HOST:PORT; port 0 picks one) and start serving.

    Raises OSError when the address cannot be bound, ValueError for a malformed one.
    """
    address = _hostport(listen)
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", 0),
    ])
    pb_grpc.add_GatewayServicer_to_server(GatewayService(core), server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        [SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME], server)
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as e:  # grpcio reports a failed bind this way
        raise OSError(str(e).split(";")[0]) from None
    if port == 0:
        raise OSError(f"failed to bind to address {address}")
    await server.start()
    running = GrpcServer(server, port, health, core)
    # Not SERVING until the cluster has answered once.
    for name in ("", SERVICE_NAME):
        await health.set(name, _NOT_SERVING)
    running.start_health()
    return running


__all__ = ["GrpcServer", "start_grpc", "tls_credentials"]
