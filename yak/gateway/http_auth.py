"""Who each HTTP request and WebSocket comes from, and the core that acts for it.

`HttpAuth` is the app's outermost layer. It puts the request's `Caller`
(`yak.gateway.core.callers`) in the ASGI scope; every route takes its Kafka clients from
there (`caller_core`), never from the gateway's own core directly.

- `http_auth="none"`: every caller acts as the gateway (its own login on the cluster).
- `http_auth="basic"`: every path, the console's page and its API, the REST Proxy, `/ws`,
  the schema registry and `/metrics` included, needs `Authorization: Basic` credentials
  of a user the cluster knows. The user is logged in to the cluster (SASL, see
  `UserLogin`), and the request runs with that user's own Kafka clients, so the cluster's
  ACLs for that user decide. No credentials, or credentials the cluster refuses: 401 with
  `WWW-Authenticate: Basic realm="yak"` (a browser then asks, and sends them with every
  later request of the console, `fetch()` and the WebSocket handshake included).

Two kinds of path do not reach the cluster with the caller's own clients, so the cluster
is asked what the caller may do before they run (answers cached `CHECK_TTL_S` per caller):

- the schema registry (Confluent's API: `/subjects`, `/schemas`, `/config`, `/mode`,
  `/compatibility`, `/api/registry/`) keeps its schemas in topic `_schemas` with the
  gateway's clients: reading needs READ on that topic, a change (register, delete, set
  config or mode) needs WRITE, as the caller's authorized operations on the topic say
  (DescribeTopics);
- `/metrics` shows the whole cluster: it needs DESCRIBE on the cluster (DescribeCluster's
  authorized operations).

Refusals are 403 with the Kafka error named (`TOPIC_AUTHORIZATION_FAILED`,
`CLUSTER_AUTHORIZATION_FAILED`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from yak.gateway.cluster import ClusterError
from yak.gateway.core import GatewayCore, GatewayError, Reason
from yak.gateway.core.callers import Caller, callers_of, denied
from yak.gateway.core.errors import from_cluster_error

SCOPE_KEY = "yak.caller"
CHECK_TTL_S = 5.0
REALM = 'Basic realm="yak", charset="UTF-8"'
REGISTRY_TOPIC = "_schemas"
_REGISTRY = re.compile(r"^/(subjects|schemas|config|mode|compatibility|contexts)(/|$)"
                       r"|^/api/registry/")
_REGISTRY_WRITE = re.compile(r"^/subjects/[^/]+/versions/?$")


def caller(conn: HTTPConnection) -> Caller:
    """The request's caller (the gateway itself when the app runs without `HttpAuth`)."""
    found = conn.scope.get(SCOPE_KEY)
    if found is None:
        found = callers_of(conn.app.state.gateway.core).gateway
    return found  # type: ignore[no-any-return]


def caller_core(conn: HTTPConnection) -> GatewayCore:
    """The core whose Kafka clients act for this request's caller."""
    return caller(conn).core


class HttpAuth:
    """ASGI middleware: authenticate, then check what the cluster lets the caller do on
    paths served with the gateway's own clients (see the module docstring)."""

    def __init__(self, app: ASGIApp, gateway: Any) -> None:
        self.app = app
        self.gateway = gateway
        self.basic = gateway.settings.http_auth == "basic"
        self._checks: dict[tuple[str, str], tuple[float, frozenset[str]]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        callers = callers_of(self.gateway.core)
        if not self.basic:
            scope[SCOPE_KEY] = callers.gateway
            await self.app(scope, receive, send)
            return
        credentials = _basic_credentials(scope)
        if credentials is None:
            await _refuse(scope, receive, send, 401, 40101,
                          "Authentication required: HTTP Basic credentials of a Kafka user")
            return
        try:
            who = await callers.login(*credentials)
            await self._check_path(scope, who)
        except GatewayError as e:
            status, code = {Reason.UNAUTHENTICATED: (401, 40101),
                            Reason.PERMISSION_DENIED: (403, 40301)}.get(e.reason, (503, 50301))
            await _refuse(scope, receive, send, status, code, e.message)
            return
        scope[SCOPE_KEY] = who
        await self.app(scope, receive, send)

    async def _check_path(self, scope: Scope, who: Caller) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path == "/metrics":
            if "DESCRIBE" not in await self._ops(who, "cluster"):
                raise denied("CLUSTER", "kafka-cluster", "DESCRIBE")
        elif _REGISTRY.match(path):
            method = scope.get("method", "GET")
            write = method in ("PUT", "DELETE") or (method == "POST"
                                                    and _REGISTRY_WRITE.match(path) is not None)
            registry = self.gateway.registry
            if registry is not None:
                await registry.ensure_started()  # the topic exists before it is asked about
            op = "WRITE" if write else "READ"
            if op not in await self._ops(who, "topic"):
                raise denied("TOPIC", REGISTRY_TOPIC, op)

    async def _ops(self, who: Caller, what: str) -> frozenset[str]:
        key = (who.principal, what)
        now = time.monotonic()
        hit = self._checks.get(key)
        if hit is not None and now - hit[0] < CHECK_TTL_S:
            return hit[1]
        cluster = who.core.cluster
        try:
            if what == "cluster":
                ops = await cluster.cluster_operations()
            else:
                _, ops = await cluster.topic_access(REGISTRY_TOPIC)
        except ClusterError as e:  # an authorization failure means "nothing"
            if not e.name.endswith("AUTHORIZATION_FAILED"):
                raise from_cluster_error(e) from None
            ops = frozenset()
        if len(self._checks) > 4096:
            self._checks.clear()
        self._checks[key] = (now, ops)
        return ops


def _basic_credentials(scope: Scope) -> tuple[str, str] | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() != "basic":
                return None
            try:
                text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            user, sep, password = text.partition(":")
            return (user, password) if sep else None
    return None


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: int,
                  message: str) -> None:
    """A REST-Proxy-shaped error; for a WebSocket handshake the same HTTP answer (ASGI's
    denial response), or a close (HTTP 403) where the server cannot send one."""
    body = json.dumps({"error_code": code, "message": message}).encode()
    headers = [(b"content-type", b"application/vnd.kafka.v2+json"),
               (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", REALM.encode()))
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        if "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": status,
                        "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008})
        return
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["HttpAuth", "caller", "caller_core"]
