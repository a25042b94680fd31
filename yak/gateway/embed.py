"""Run the gateway's ASGI app with uvicorn on an already running event loop.

`yak serve --http` calls `start_http` after the broker is listening: uvicorn's
`Server.serve()` becomes one more task on the broker's loop (no thread, no process),
and the gateway still talks to the broker over its Kafka listener like any client.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import socket
from typing import Any

import uvicorn

from yak.gateway.settings import GatewaySettings, parse_hostport

log = logging.getLogger(__name__)


class LazyApp:
    """The ASGI app, imported and built on the first connection.

    Every `yak serve` listens on HTTP by default; FastAPI and the gateway cost ~0.4 s of
    CPU to import, which a broker nobody browses should not pay at start-up.

    The import runs in a worker thread, not on the broker's event loop: it is module code
    run for 0.4 s on a quiet machine and 6 s under a loaded test suite, and on the loop it
    answered nothing for that long, past the liveness probe's bound
    (`broker.liveness.unresponsive.ms`, 2 s). `yak cluster up` asks every console once the
    brokers registered, and a live broker was fenced as frozen for it (CI, 2026-11-27: a
    broker missing from Metadata right after `cluster up`). In a thread the loop still
    runs between the interpreter's GIL switches (every 5 ms). Building the app from the
    imported modules (~0.25 s) stays on the loop: its objects belong to it.
    """

    def __init__(self, settings: GatewaySettings, core: Any = None) -> None:
        self.settings = settings
        self.core = core  # a GatewayCore shared with the gRPC gateway, or None: the app's own
        self.app: Any = None
        self._building: asyncio.Future[None] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.app is None:
            # One build, whoever connects first; the others wait for that one.
            if self._building is None:
                self._building = asyncio.ensure_future(self._build())
            await asyncio.shield(self._building)
        await self.app(scope, receive, send)

    async def _build(self) -> None:
        await asyncio.to_thread(importlib.import_module, "yak.gateway.app")
        from yak.gateway.app import create_app

        self.app = create_app(self.settings, self.core)
        # What is imported and built by now lives as long as the process: frozen, the
        # collector's full collections skip it and walk only what requests create.
        # Unfrozen they walked ~130k objects, ~0.1 s of CPU each, ~20 us per WebSocket
        # record (docs/benchmarks/gateway.md).
        gc.freeze()

    async def close(self) -> None:
        if self.app is not None:
            await self.app.state.gateway.stop()


class HttpServer:
    """A uvicorn server running as a task; `stop()` shuts it down gracefully."""

    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], app: LazyApp) -> None:
        self.server = server
        self.task = task
        self.app = app

    @property
    def port(self) -> int:
        for s in self.server.servers:
            for sock in s.sockets:
                return int(sock.getsockname()[1])
        return 0

    async def stop(self) -> None:
        self.server.should_exit = True
        try:
            await asyncio.wait_for(self.task, 10)
        except (TimeoutError, asyncio.CancelledError):
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        with contextlib.suppress(Exception):
            await self.app.close()


async def start_http(listen: str, settings: GatewaySettings, core: Any = None) -> HttpServer:
    """Start serving on `listen`; raises OSError if the port cannot be bound.

    The socket is bound here, not by uvicorn: uvicorn answers a bind failure with
    `sys.exit`, which inside a task on the broker's loop would stop the broker.
    """
    host, port = parse_hostport(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    app = LazyApp(settings, core)
    # No lifespan: the gateway starts nothing until used, and LazyApp.close() stops it.
    tls = settings.http_ssl  # HTTPS: an SSLContext from Kafka's ssl.* server settings
    # http="httptools", not "auto": auto falls back to h11's pure-Python parser without a
    # word when httptools is missing (its cost: docs/benchmarks/gateway.md).
    config = uvicorn.Config(
        app, loop="none", lifespan="off", log_level="warning", http="httptools",
        ws="websockets-sansio", ws_max_size=1024 * 1024, timeout_graceful_shutdown=3,
        access_log=False,
        ssl_context_factory=(lambda _config, _default: tls) if tls is not None else None,
    )
    server = uvicorn.Server(config)
    # uvicorn would take over SIGINT/SIGTERM; the broker (or `yak gateway`) owns signals.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.get_running_loop().create_task(_serve(server, sock))
    while not server.started:
        if task.done():
            sock.close()
            exc = task.exception() if not task.cancelled() else None
            raise OSError(f"HTTP server on {listen} failed to start: {exc!r}")
        await asyncio.sleep(0.02)
    return HttpServer(server, task, app)


async def _serve(server: uvicorn.Server, sock: socket.socket) -> None:
    try:
        await server.serve(sockets=[sock])
    except SystemExit as e:  # uvicorn's startup failure (e.g. lifespan) must not end the loop
        raise RuntimeError(f"uvicorn exited with {e.code}") from None


class EmbeddedGateway:
    """The gateway's servers inside `yak serve`: HTTP and/or gRPC sharing one core."""

    def __init__(self, http: HttpServer | None, grpc: Any, core: Any) -> None:
        self.http = http
        self.grpc = grpc
        self.core = core  # shared by both when gRPC is on; else the HTTP app owns its own

    async def stop(self) -> None:
        if self.grpc is not None:
            with contextlib.suppress(Exception):
                await self.grpc.stop()
        if self.http is not None:
            await self.http.stop()
        if self.core is not None:
            with contextlib.suppress(Exception):
                await self.core.close()


async def start_embedded(listen: str | None, bootstrap: str, broker_metrics: Any = None,
                         grpc: str | None = None,
                         security: Any = None,
                         grpc_credentials: Any = None,
                         **options: Any) -> EmbeddedGateway | None:
    """The gateway inside `yak serve`: HTTP on `listen`, gRPC on `grpc` (None: off).

    A port that cannot be bound only costs a warning: the broker must keep serving Kafka
    clients even if, say, another process holds 8080. `broker_metrics` is the broker's
    metrics object, rendered on `/metrics`; `security` the client security of the listener
    it connects to (the broker's inter-broker listener, with the broker's own credentials).
    `options`: further `GatewaySettings` (HTTPS, who callers are: `user_login`,
    `http_auth`, `http_ssl`, `grpc_auth`, `principal_mapper`).
    """
    settings = GatewaySettings(bootstrap=bootstrap, embedded=True,
                               broker_metrics=broker_metrics, security=security, **options)
    core = None
    if grpc is not None:  # gRPC is opt-in, so its imports are paid only when asked for
        # In a thread, as LazyApp's: the broker is registered and probed by now, and grpc's
        # and the core's imports on its loop would leave its pings unanswered meanwhile.
        for module in ("yak.gateway.core", "yak.gateway.grpc_api.server"):
            await asyncio.to_thread(importlib.import_module, module)
        from yak.gateway.core import GatewayCore

        core = GatewayCore(settings)
    http_server = None
    if listen is not None:
        try:
            http_server = await start_http(listen, settings, core)
        except (OSError, ValueError) as e:
            log.warning("HTTP gateway not started on %s: %s", listen, e)
        else:
            host, _ = parse_hostport(listen)
            scheme = "https" if settings.http_ssl is not None else "http"
            print(f"Yak HTTP gateway on {scheme}://{host}:{http_server.port}/", flush=True)
    grpc_server = None
    if grpc is not None:
        from yak.gateway.grpc_api.server import start_grpc

        try:
            grpc_server = await start_grpc(grpc, core, grpc_credentials)
        except (OSError, ValueError) as e:
            log.warning("gRPC gateway not started on %s: %s", grpc, e)
        else:
            host, _ = parse_hostport(grpc)
            print(f"Yak gRPC gateway on {host}:{grpc_server.port}", flush=True)
    if http_server is None and grpc_server is None:
        if core is not None:
            await core.close()
        return None
    return EmbeddedGateway(http_server, grpc_server, core)
