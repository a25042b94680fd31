"""etcd v3's values and errors as Yak uses them: keys and values, ranges, the compares and
operations of a transaction, its results, watch events, and the errors of a call.

Why a module of its own: these are what every caller of the metadata store builds and reads
(`Compare`, `Op`, `KeyValue`, ...), and `LocalKV` (the one-node backend) speaks them too; the
transport (`yak.cluster.etcd`, the gateway's HTTP client) and the watch stream
(`yak.cluster.etcd_watch`) are one implementation of that API. The JSON shapes here are the
gateway's (base64 keys and values, 64-bit integers as strings, zero values omitted), which
LocalKV's transactions take too. Import them from `yak.cluster.etcd`, which re-exports them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Compare",
    "CompactedError",
    "EtcdError",
    "EtcdRequestError",
    "EtcdUnavailable",
    "Event",
    "KeyValue",
    "LeaseNotFoundError",
    "Op",
    "RangeResult",
    "TxnResult",
    "WatchResponse",
    "prefix_range_end",
]

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
