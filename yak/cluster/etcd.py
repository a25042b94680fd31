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
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

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

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_CONNECT_TIMEOUT_S = 1.0
# A watch stream with no traffic for this long is re-opened (from the next revision), so a
# member that died or was paused without closing its socket is noticed.
DEFAULT_WATCH_IDLE_S = 15.0

# gRPC status codes etcd returns in gateway error bodies.
_GRPC_INVALID_ARGUMENT = 3
_GRPC_DEADLINE_EXCEEDED = 4
_GRPC_NOT_FOUND = 5
_GRPC_OUT_OF_RANGE = 11
_GRPC_UNAVAILABLE = 14


# ---------------------------------------------------------------- errors


class EtcdError(Exception):
    """Any failure talking to etcd. `code` is the gRPC status code when etcd sent one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    """No endpoint answered in time, or a write's outcome is unknown (it may have applied)."""


class EtcdRequestError(EtcdError):
    """etcd refused the request itself (bad argument, quota exceeded, ...): do not retry."""


class LeaseNotFoundError(EtcdError):
    """The lease does not exist (never granted, revoked, or expired)."""


class CompactedError(EtcdError):
    """The revision asked for has been compacted away; `compact_revision` is the oldest kept."""

    def __init__(self, message: str, compact_revision: int) -> None:
        super().__init__(message, _GRPC_OUT_OF_RANGE)
        self.compact_revision = compact_revision


# ---------------------------------------------------------------- values


def _b64(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _key_str(text: str | None) -> str:
    return _unb64(text).decode("utf-8", "surrogateescape")


def _int(d: dict[str, Any], name: str) -> int:
    """A 64-bit field: a JSON string, or absent when zero."""
    v = d.get(name)
    return int(v) if v is not None else 0


def prefix_range_end(prefix: bytes | str) -> bytes:
    """etcd's range_end for "every key starting with prefix" (clientv3.GetPrefixRangeEnd)."""
    p = bytearray(prefix.encode() if isinstance(prefix, str) else prefix)
    for i in range(len(p) - 1, -1, -1):
        if p[i] < 0xFF:
            p[i] += 1
            return bytes(p[: i + 1])
    return b"\x00"  # every key


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KeyValue:
        return cls(
            key=_key_str(d.get("key")),
            value=_unb64(d.get("value")),
            create_revision=_int(d, "create_revision"),
            mod_revision=_int(d, "mod_revision"),
            version=_int(d, "version"),
            lease=_int(d, "lease"),
        )

    def json(self) -> Any:
        """The value decoded as JSON (every value Yak writes is JSON)."""
        return json.loads(self.value)


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: list[KeyValue]
    count: int
    revision: int  # the store revision the range was read at
    more: bool = False


_TARGETS = {"value": "VALUE", "version": "VERSION", "create": "CREATE", "mod": "MOD",
            "lease": "LEASE"}
_RESULTS = {"==": "EQUAL", "!=": "NOT_EQUAL", ">": "GREATER", "<": "LESS"}


@dataclass(frozen=True, slots=True)
class Compare:
    """One txn guard. Build with the class methods: `Compare.create_revision(k, "==", 0)`."""

    key: str
    target: str
    result: str
    operand: bytes | int

    @classmethod
    def value(cls, key: str, op: str, value: bytes | str) -> Compare:
        return cls(key, "VALUE", _RESULTS[op], value.encode() if isinstance(value, str) else value)

    @classmethod
    def version(cls, key: str, op: str, version: int) -> Compare:
        return cls(key, "VERSION", _RESULTS[op], version)

    @classmethod
    def create_revision(cls, key: str, op: str, revision: int) -> Compare:
        return cls(key, "CREATE", _RESULTS[op], revision)

    @classmethod
    def mod_revision(cls, key: str, op: str, revision: int) -> Compare:
        return cls(key, "MOD", _RESULTS[op], revision)

    @classmethod
    def lease(cls, key: str, op: str, lease_id: int) -> Compare:
        return cls(key, "LEASE", _RESULTS[op], lease_id)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"key": _b64(self.key), "target": self.target, "result": self.result}
        if self.target == "VALUE":
            d["value"] = _b64(self.operand)  # type: ignore[arg-type]
        else:
            field_name = {"VERSION": "version", "CREATE": "create_revision",
                          "MOD": "mod_revision", "LEASE": "lease"}[self.target]
            d[field_name] = str(self.operand)
        return d


@dataclass(frozen=True, slots=True)
class Op:
    """One txn operation: `Op.put(...)`, `Op.delete(...)`, `Op.get(...)` or `Op.txn(...)`."""

    kind: Literal["put", "delete", "range", "txn"]
    body: dict[str, Any]

    @classmethod
    def put(cls, key: str, value: bytes | str, lease: int = 0) -> Op:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        return cls("put", body)

    @classmethod
    def delete(cls, key: str, prefix: bool = False) -> Op:
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_range_end(key))
        return cls("delete", body)

    @classmethod
    def get(cls, key: str, prefix: bool = False) -> Op:
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_range_end(key))
        return cls("range", body)

    @classmethod
    def txn(cls, compares: Sequence[Compare], success: Sequence[Op],
            failure: Sequence[Op] = ()) -> Op:
        """A nested transaction (etcd >= 3.3)."""
        return cls("txn", _txn_body(compares, success, failure))

    def to_json(self) -> dict[str, Any]:
        name = {"put": "request_put", "delete": "request_delete_range",
                "range": "request_range", "txn": "request_txn"}[self.kind]
        return {name: self.body}


def _txn_body(compares: Sequence[Compare], success: Sequence[Op],
              failure: Sequence[Op]) -> dict[str, Any]:
    return {"compare": [c.to_json() for c in compares],
            "success": [o.to_json() for o in success],
            "failure": [o.to_json() for o in failure]}


@dataclass(frozen=True, slots=True)
class TxnResult:
    """`responses[i]` answers op i of the branch that ran: a RangeResult for a get, the number
    deleted for a delete, the revision for a put, a TxnResult for a nested txn."""

    succeeded: bool
    revision: int
    responses: list[Any]

    @classmethod
    def from_json(cls, d: dict[str, Any], revision: int | None = None) -> TxnResult:
        rev = revision if revision is not None else _int(d.get("header", {}), "revision")
        out: list[Any] = []
        for r in d.get("responses", []):
            if "response_range" in r:
                rr = r["response_range"]
                out.append(RangeResult([KeyValue.from_json(kv) for kv in rr.get("kvs", [])],
                                       _int(rr, "count"), rev, bool(rr.get("more"))))
            elif "response_put" in r:
                out.append(rev)
            elif "response_delete_range" in r:
                out.append(_int(r["response_delete_range"], "deleted"))
            elif "response_txn" in r:
                out.append(TxnResult.from_json(r["response_txn"], rev))
            else:
                out.append(None)
        return cls(bool(d.get("succeeded", False)), rev, out)


@dataclass(frozen=True, slots=True)
class Event:
    type: Literal["PUT", "DELETE"]
    kv: KeyValue  # for a DELETE: key and mod_revision only

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Event:
        return cls("DELETE" if d.get("type") == "DELETE" else "PUT", KeyValue.from_json(d["kv"]))


@dataclass(frozen=True, slots=True)
class WatchResponse:
    """A batch of events, in revision order. After a compaction the stream cannot be resumed:
    `snapshot` then holds every current key in range (read at `revision`) and replaces whatever
    the watcher knew; events continue after it."""

    revision: int
    events: list[Event] = field(default_factory=list)
    snapshot: list[KeyValue] | None = None


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


class Watch:
    """A resumable watch. Iterate it (`async for resp in watch`); `close()` ends it.

    After a dropped stream (member died, idle timeout, failover) it re-opens from the revision
    after the last one delivered, so no event is missed or repeated. If that revision was
    compacted meanwhile, it re-reads the range and yields a WatchResponse with a snapshot.
    It keeps retrying while etcd is unreachable (a watcher has nothing better to do); bound
    any wait on it from outside.
    """

    def __init__(self, client: EtcdClient, key: str, *, prefix: bool, start_revision: int,
                 idle_timeout: float) -> None:
        self._client = client
        self.key = key
        self.prefix = prefix
        self.next_revision = start_revision  # 0 = "from now"
        self.idle_timeout = idle_timeout
        self.reconnects = 0
        self._closed = False

    def close(self) -> None:
        self._closed = True

    def __aiter__(self) -> AsyncIterator[WatchResponse]:
        return self._run()

    async def _snapshot(self) -> WatchResponse:
        r = await self._client.range(self.key, prefix=self.prefix)
        self.next_revision = r.revision + 1
        return WatchResponse(r.revision, [], r.kvs)

    async def _run(self) -> AsyncIterator[WatchResponse]:
        backoff = 0.05
        attempt = 0
        while not self._closed:
            create: dict[str, Any] = {"key": _b64(self.key), "progress_notify": True}
            if self.prefix:
                create["range_end"] = _b64(prefix_range_end(self.key))
            if self.next_revision:
                create["start_revision"] = str(self.next_revision)
            order = self._client._order()
            idx = order[attempt % len(order)]
            try:
                async for msg in self._client._watch_stream(idx, create, self.idle_timeout):
                    if "error" in msg and "result" not in msg:
                        err = msg["error"]
                        text = err.get("message", err) if isinstance(err, dict) else err
                        raise EtcdUnavailable(f"etcd watch: {text}")
                    res = msg.get("result", {})
                    hdr_rev = _int(res.get("header", {}), "revision")
                    if res.get("canceled"):
                        compact = _int(res, "compact_revision")
                        if compact:
                            log.info("etcd watch on %s: revision %d compacted (oldest %d);"
                                     " re-reading", self.key, self.next_revision, compact)
                            snap = await self._snapshot()
                            yield snap
                            break
                        raise EtcdUnavailable(
                            f"etcd watch canceled: {res.get('cancel_reason') or 'no reason'}")
                    backoff = 0.05
                    if res.get("created"):
                        if not self.next_revision:
                            self.next_revision = hdr_rev + 1
                        continue
                    events = [Event.from_json(e) for e in res.get("events", [])]
                    if events:
                        self.next_revision = events[-1].kv.mod_revision + 1
                        yield WatchResponse(hdr_rev, events)
                    elif hdr_rev >= self.next_revision:  # progress notification
                        self.next_revision = hdr_rev + 1
                    if self._closed:
                        return
            except (httpx.TransportError, httpx.TimeoutException, EtcdUnavailable,
                    json.JSONDecodeError) as e:
                if not isinstance(e, httpx.ReadTimeout):
                    log.debug("etcd watch on %s via %s dropped: %s", self.key,
                              self._client.endpoints[idx], e)
                    attempt += 1
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
            except EtcdError as e:
                log.warning("etcd watch on %s: %s; retrying", self.key, e)
                attempt += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            self.reconnects += 1
