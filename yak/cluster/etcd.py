"""An asyncio etcd v3 client over etcd's JSON gateway (`/v3/...`), with httpx.

Why the gateway and not gRPC: the gateway is part of every etcd server since 3.3, needs no
generated code and no protobuf pin (the PyPI `etcd3` client breaks on protobuf >= 4), and
httpx is already a dependency. Patroni's etcd3 backend talks to etcd the same way.

The gateway's quirks, all handled here so callers never see them:
- keys and values are base64 in both directions;
- 64-bit integers (revisions, lease ids, TTLs, counts) come back as JSON strings;
- fields with a zero value are omitted, so `succeeded: false`, `count: 0`, an event type of
  PUT (enum 0) and a keepalive TTL of 0 (lease gone) are all *absent*;
- errors are `{"error", "message", "code"}` bodies with gRPC status codes, not HTTP ones.

Every call is bounded by the client's timeout. Several endpoints fail over: a request that
certainly did not reach etcd (connection refused, connect timeout, a member without a
leader) moves on to the next endpoint; a read is retried on the next endpoint after any
transport error; a write whose outcome is unknown raises `EtcdUnavailable` (outcome
unknown) rather than being sent twice, because a retried compare-and-set could report the
failure of its own first success.

The client is split by job: `etcd_values.py` holds the API's values and errors (compares,
operations, key-values, results, events), `etcd_watch.py` the resumable watch; this module
is the transport (endpoints, failover, the gateway's error bodies) and the calls. Every
public name stays importable from here.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import httpx

from yak.cluster.etcd_values import (
    _GRPC_DEADLINE_EXCEEDED,
    _GRPC_NOT_FOUND,
    _GRPC_OUT_OF_RANGE,
    _GRPC_UNAVAILABLE,
    CompactedError,
    Compare,
    EtcdError,
    EtcdRequestError,
    EtcdUnavailable,
    Event,
    KeyValue,
    LeaseNotFoundError,
    Op,
    RangeResult,
    TxnResult,
    WatchResponse,
    _b64,
    _int,
    _txn_body,
    prefix_range_end,
)
from yak.cluster.etcd_watch import Watch

__all__ = [
    "Compare",
    "CompactedError",
    "EtcdClient",
    "EtcdError",
    "EtcdRequestError",
    "EtcdUnavailable",
    "Event",
    "KeyValue",
    "LeaseNotFoundError",
    "Op",
    "RangeResult",
    "TxnResult",
    "Watch",
    "WatchResponse",
    "parse_endpoints",
    "prefix_range_end",
]


DEFAULT_TIMEOUT_S = 5.0
DEFAULT_CONNECT_TIMEOUT_S = 1.0
# A watch stream with no traffic for this long is re-opened (from the next revision), so a
# member that died or was paused without closing its socket is noticed.
DEFAULT_WATCH_IDLE_S = 15.0


# ---------------------------------------------------------------- endpoints


def parse_endpoints(spec: str | Sequence[str]) -> list[str]:
    """`etcd://h1:p1,h2:p2` (or a list of `host:port` / `http://host:port`) to base URLs.

    Raises ValueError with a one-line message for anything else.
    """
    items: list[str]
    if isinstance(spec, str):
        s = spec.strip()
        if s.startswith("etcd://"):
            s = s[len("etcd://"):]
            s = s.split("/", 1)[0]  # a path names the cluster namespace; not an endpoint
        items = [p.strip() for p in s.split(",")]
    else:
        items = [str(p).strip() for p in spec]
    out: list[str] = []
    for item in items:
        if not item:
            raise ValueError(f"empty etcd endpoint in {spec!r}")
        url = item if "://" in item else f"http://{item}"
        scheme, _, hostport = url.partition("://")
        if scheme != "http":
            raise ValueError(f"etcd endpoint {item!r}: only http:// endpoints are supported")
        host, sep, port = hostport.rstrip("/").rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"etcd endpoint {item!r} is not HOST:PORT")
        out.append(f"http://{host}:{int(port)}")
    return out


class _NotSent(Exception):
    """Internal: this endpoint surely did not apply the request; try the next one."""


# ---------------------------------------------------------------- the client


class EtcdClient:
    """The operations Yak needs from etcd; each bounded by `timeout` seconds overall."""

    def __init__(self, endpoints: str | Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        self.endpoints = parse_endpoints(endpoints)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._current = 0  # index of the endpoint that answered last
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    def for_thread(self) -> EtcdClient:
        """A client of the same endpoints for another thread's event loop (an httpx
        client belongs to the loop it runs on); the caller closes it."""
        return EtcdClient(self.endpoints, timeout=self.timeout,
                          connect_timeout=self.connect_timeout)

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- transport

    def _avoid(self, idx: int) -> None:
        """Later calls start at the next endpoint: one that failed (down, paused, cut off
        from its leader) should not cost every following call its timeout."""
        if idx == self._current:
            self._current = (idx + 1) % len(self.endpoints)

    def _order(self) -> list[int]:
        n = len(self.endpoints)
        return [(self._current + i) % n for i in range(n)]

    async def _post(self, path: str, body: dict[str, Any], *, idempotent: bool,
                    timeout: float | None = None) -> dict[str, Any]:
        budget = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        failures: list[str] = []
        order = self._order()
        for n, idx in enumerate(order):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # A request that may be retried gets its share of what is left, so one member
            # that accepts connections but never answers (paused, stuck) cannot use it all.
            attempt = left / (len(order) - n) if idempotent else left
            url = self.endpoints[idx] + path
            try:
                resp = await self._http.post(
                    url, json=body,
                    timeout=httpx.Timeout(attempt, connect=min(self.connect_timeout, attempt)))
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as e:
                failures.append(f"{self.endpoints[idx]}: {type(e).__name__}")
                self._avoid(idx)
                continue
            except (httpx.TransportError, httpx.TimeoutException) as e:
                failures.append(f"{self.endpoints[idx]}: {type(e).__name__}")
                self._avoid(idx)
                if idempotent:
                    continue
                raise EtcdUnavailable(
                    f"etcd {path} outcome unknown ({failures[-1]})") from e
            try:
                data = resp.json()
            except ValueError:
                failures.append(f"{self.endpoints[idx]}: HTTP {resp.status_code} non-JSON")
                continue
            if resp.status_code != 200 or ("code" in data and "error" in data):
                try:
                    self._raise_for(path, data)
                except _NotSent:
                    failures.append(f"{self.endpoints[idx]}: {data.get('message')}")
                    self._avoid(idx)
                    continue
                except EtcdUnavailable as e:
                    failures.append(f"{self.endpoints[idx]}: {e}")
                    self._avoid(idx)
                    if idempotent:
                        continue
                    raise
            self._current = idx
            return data
        raise EtcdUnavailable(
            f"etcd {path}: no endpoint answered within {budget:g}s ("
            + ("; ".join(failures) or "out of time") + ")")

    @staticmethod
    def _raise_for(path: str, data: dict[str, Any]) -> None:
        code = data.get("code")
        msg = str(data.get("message") or data.get("error") or data)
        if code == _GRPC_UNAVAILABLE and ("no leader" in msg or "not capable" in msg):
            raise _NotSent(msg)
        if code == _GRPC_NOT_FOUND and "lease" in msg:
            raise LeaseNotFoundError(msg, code)
        if code == _GRPC_OUT_OF_RANGE and "compacted" in msg:
            raise CompactedError(msg, 0)
        if code in (_GRPC_UNAVAILABLE, _GRPC_DEADLINE_EXCEEDED):
            raise EtcdUnavailable(f"etcd {path}: {msg}", code)
        raise EtcdRequestError(f"etcd {path}: {msg}", code)

    # -- key-value

    async def range(self, key: str, *, prefix: bool = False, range_end: bytes | None = None,
                    revision: int = 0, limit: int = 0, keys_only: bool = False) -> RangeResult:
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            range_end = prefix_range_end(key)
        if range_end is not None:
            body["range_end"] = _b64(range_end)
        if revision:
            body["revision"] = str(revision)
        if limit:
            body["limit"] = str(limit)
        if keys_only:
            body["keys_only"] = True
        d = await self._post("/v3/kv/range", body, idempotent=True)
        return RangeResult([KeyValue.from_json(kv) for kv in d.get("kvs", [])],
                           _int(d, "count"), _int(d.get("header", {}), "revision"),
                           bool(d.get("more")))

    async def get(self, key: str) -> KeyValue | None:
        r = await self.range(key)
        return r.kvs[0] if r.kvs else None

    async def put(self, key: str, value: bytes | str, *, lease: int = 0) -> int:
        """Returns the revision of the write."""
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        d = await self._post("/v3/kv/put", body, idempotent=False)
        return _int(d.get("header", {}), "revision")

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        """Returns how many keys were deleted."""
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_range_end(key))
        d = await self._post("/v3/kv/deleterange", body, idempotent=False)
        return _int(d, "deleted")

    async def txn(self, compares: Iterable[Compare], success: Iterable[Op] = (),
                  failure: Iterable[Op] = ()) -> TxnResult:
        ok, ko = list(success), list(failure)
        body = _txn_body(list(compares), ok, ko)
        read_only = all(o.kind == "range" for o in (*ok, *ko))
        d = await self._post("/v3/kv/txn", body, idempotent=read_only)
        return TxnResult.from_json(d)

    async def compact(self, revision: int) -> None:
        await self._post("/v3/kv/compaction", {"revision": str(revision), "physical": True},
                         idempotent=True)

    # -- leases (etcd's TTL granularity is one second; its minimum is about 2 s)

    async def lease_grant(self, ttl_s: int, lease_id: int = 0) -> tuple[int, int]:
        """Returns (lease id, granted TTL in seconds)."""
        body: dict[str, Any] = {"TTL": str(ttl_s)}
        if lease_id:
            body["ID"] = str(lease_id)
        d = await self._post("/v3/lease/grant", body, idempotent=False)
        if d.get("error"):
            raise EtcdRequestError(f"etcd lease grant: {d['error']}")
        return _int(d, "ID"), _int(d, "TTL")

    async def lease_keepalive(self, lease_id: int, timeout: float | None = None) -> int:
        """One renewal. Returns the TTL now granted; 0 means the lease no longer exists."""
        d = await self._post("/v3/lease/keepalive", {"ID": str(lease_id)}, idempotent=True,
                             timeout=timeout)
        result = d.get("result", d)
        return _int(result, "TTL")

    async def lease_revoke(self, lease_id: int) -> None:
        """Revoke (deleting every key on the lease). A lease already gone is not an error."""
        with contextlib.suppress(LeaseNotFoundError):
            await self._post("/v3/lease/revoke", {"ID": str(lease_id)}, idempotent=True)

    async def lease_ttl(self, lease_id: int) -> int:
        """Seconds left on the lease; -1 when it does not exist."""
        d = await self._post("/v3/lease/timetolive", {"ID": str(lease_id)}, idempotent=True)
        return _int(d, "TTL")

    # -- watch

    def watch(self, key: str, *, prefix: bool = False, start_revision: int = 0,
              idle_timeout: float = DEFAULT_WATCH_IDLE_S) -> Watch:
        """Changes under `key` from `start_revision` (0: from now) as an async iterator of
        WatchResponse, surviving dropped streams and failed-over endpoints."""
        return Watch(self, key, prefix=prefix, start_revision=start_revision,
                     idle_timeout=idle_timeout)

    async def _watch_stream(self, endpoint_idx: int, create: dict[str, Any],
                            idle_timeout: float) -> AsyncIterator[dict[str, Any]]:
        url = self.endpoints[endpoint_idx] + "/v3/watch"
        # Kafka-style fail-fast: a member cut off from the leader cancels the stream instead
        # of silently delivering nothing (etcd's "hasleader" metadata, as clientv3's
        # WithRequireLeader; the gateway forwards Grpc-Metadata-* headers).
        headers = {"Grpc-Metadata-hasleader": "true"}
        timeout = httpx.Timeout(None, connect=self.connect_timeout, read=idle_timeout)
        async with self._http.stream("POST", url, json={"create_request": create},
                                     headers=headers, timeout=timeout) as resp:
            if resp.status_code != 200:
                body = await resp.aread()
                try:
                    self._raise_for("/v3/watch", json.loads(body))
                except _NotSent as e:
                    raise EtcdUnavailable(str(e)) from e
                raise EtcdUnavailable(f"etcd watch: HTTP {resp.status_code}")
            async for line in resp.aiter_lines():
                if line.strip():
                    yield json.loads(line)
