"""The gateway's ASGI app: REST Proxy v2, `/ws`, the console and its API, `/metrics`.

The same app runs embedded in `yak serve` (uvicorn's `Server.serve()` as a task on the
broker's event loop) and standalone (`yak gateway`); either way it reaches the cluster
only over the Kafka protocol, through `bootstrap`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from yak.gateway import console_api, errors, rest, rest_share, rest_tiered, ws
from yak.gateway.cluster import ClusterClient
from yak.gateway.core import GatewayCore
from yak.gateway.core.registry_formats import register_formats
from yak.gateway.http_auth import HttpAuth
from yak.gateway.metrics import HTTP_REQUESTS, HTTP_SECONDS, MetricsService
from yak.gateway.settings import GatewaySettings
from yak.registry import api as registry_api


class Gateway:
    """Everything the routes share, hung on `app.state.gateway`.

    `core` is the transport-neutral gateway core; when the process also serves gRPC the
    two transports share one (one producer, one admin client, one set of sessions), and
    whoever created it closes it.
    """

    def __init__(self, settings: GatewaySettings, core: GatewayCore | None = None) -> None:
        self.settings = settings
        self.embedded = settings.embedded
        self._owns_core = core is None
        self.core = core if core is not None else GatewayCore(settings)
        self.cluster: ClusterClient = self.core.cluster
        self.metrics = MetricsService(self.cluster, settings.metrics_interval_s,
                                      broker_metrics=settings.broker_metrics)
        self.registry: Any = None  # the schema registry (yak.registry), set by create_app

    async def start(self) -> None:
        """Nothing runs until used: the consumer reaper starts with the first instance."""

    async def stop(self) -> None:
        await self.metrics.stop()
        if self.registry is not None:
            await self.registry.stop()
        if self._owns_core:
            await self.core.close()


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413 before they are buffered.

    Content-Length is checked up front; a chunked body is counted as it streams and the
    request is cut off as soon as it passes the limit.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(scope, receive, send)
                    return
        seen = 0
        refused = False

        async def counting_receive() -> Message:
            # Past the limit: answer 413 ourselves and tell the app the client left, so it
            # stops reading; whatever it then tries to send is dropped.
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    refused = True
                    await self._refuse(scope, receive, send)
                    return {"type": "http.disconnect"}
            return msg

        async def guarded_send(msg: Message) -> None:
            if not refused:
                await send(msg)

        await self.app(scope, counting_receive, guarded_send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        resp = errors.error_response(
            413, 413, f"Request body larger than the gateway's limit of {self.limit} bytes"
        )
        await resp(scope, receive, send)


def create_app(settings: GatewaySettings, core: GatewayCore | None = None) -> FastAPI:
    gateway = Gateway(settings, core)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    app = FastAPI(
        title="Yak gateway",
        version="0.1.0",
        description="Confluent REST Proxy v2 compatible API, WebSocket streaming at /ws, "
                    "the web console's API under /api, Prometheus metrics at /metrics.",
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.gateway = gateway
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    errors.install(app)
    app.include_router(rest.router)
    app.include_router(rest_share.router)  # queues: /share-groups/...
    app.include_router(rest_tiered.router)  # presigned segment URLs: /tiered/v1/...
    app.include_router(console_api.router)
    app.include_router(ws.router)
    # Confluent's Schema Registry API at the root: /subjects, /schemas, /config, /mode, ...
    gateway.registry = registry_api.install(app, settings.bootstrap, settings.request_timeout_s,
                                            security=settings.security)
    # ... and its avro/jsonschema/protobuf formats on the core's one encoding point.
    register_formats(gateway.core, gateway.registry)

    @app.middleware("http")
    async def observe(request: Request, call_next: Any) -> Response:
        t0 = time.perf_counter()
        response: Response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        HTTP_REQUESTS.labels(request.method, path, str(response.status_code)).inc()
        HTTP_SECONDS.labels(request.method, path).observe(time.perf_counter() - t0)
        return response

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(await gateway.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    static_dir = resources.files("yak.console") / "static"
    index = static_dir / "index.html"

    @app.get("/", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(str(index), media_type="text/html")

    @app.get("/console", include_in_schema=False)
    async def console_alias() -> RedirectResponse:
        return RedirectResponse("/")

    app.mount("/static", StaticFiles(directory=str(static_dir)), name="static")
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    # Outermost: who is calling (HTTP Basic -> that user's Kafka clients), see http_auth.
    app.add_middleware(HttpAuth, gateway=gateway)
    return app


_RECORDS_PATH = "/consumers/{group}/instances/{instance}/records"


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the media types this API really serves.

    FastAPI documents every JSON body as application/json; the REST Proxy answers
    application/vnd.kafka.v2+json, and records as vnd.kafka.{json,binary}.v2+json.
    """
    if app.openapi_schema is not None:
        return app.openapi_schema
    from fastapi.openapi.utils import get_openapi

    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes)
    for path, ops in doc.get("paths", {}).items():
        for op in ops.values():
            for status, resp in op.get("responses", {}).items():
                content = resp.get("content")
                if not content or "application/json" not in content:
                    continue
                schema = content.pop("application/json")
                if path == _RECORDS_PATH and status == "200":
                    content["application/vnd.kafka.json.v2+json"] = schema
                    content["application/vnd.kafka.binary.v2+json"] = schema
                else:
                    content[errors.V2_JSON] = schema
    app.openapi_schema = doc
    return doc
