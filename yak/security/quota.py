"""Client quotas: Kafka's model, rate measurement and throttle time, with an injectable clock.

Entities (Kafka's ClientQuotaEntity): `user`, `client-id`, or both, each a name or the
default (None). The quota that applies to a connection is the most specific one set, in
Kafka's order:
  user+client-id, user+default client-id, user, default user+client-id,
  default user+default client-id, default user, client-id, default client-id.
Which clients share one measured rate follows Kafka too: a `user` quota is shared by all
of that user's client ids; a *default* quota is per user (or per client id), not global.

Keys: `producer_byte_rate`, `consumer_byte_rate` (bytes/s), `request_percentage` (percent
of one request-handling thread), `controller_mutation_rate` (partitions created/deleted per
second, a token bucket). Rates are Kafka's sampled windows (`quota.window.num` samples of
`quota.window.size.seconds`): a value recorded now makes the rate
`sum(samples) / elapsed`, with the elapsed time at least (samples - 1) full windows; over the
bound, the throttle time is `(rate - bound) / bound * window` -- how long the client must
stay silent for the rate to fall back to the bound (KIP-13, KIP-219). The broker answers
with that `throttle_time_ms` and then does not read from the connection for that long.

`ClientQuotas` is the composed part: it owns the `QuotaStore`, applies
DescribeClientQuotas/AlterClientQuotas semantics, and keeps one `ClientQuotaManager` per
key. Nothing here sleeps or reads a clock of its own.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from yak.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    ThrottlingQuotaExceededError,
    UnsupportedVersionError,
)
from yak.security._files import atomic_write
from yak.security.principal import KafkaPrincipal

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "IP",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "ClientQuotaManager",
    "ClientQuotas",
    "ControllerMutationQuotaManager",
    "FileQuotaStore",
    "MemoryQuotaStore",
    "QuotaEntity",
    "QuotaStore",
    "Rate",
]

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# key -> Kafka's config type (LONG keys refuse fractions)
QUOTA_KEYS = {
    PRODUCER_BYTE_RATE: "long",
    CONSUMER_BYTE_RATE: "long",
    REQUEST_PERCENTAGE: "double",
    CONTROLLER_MUTATION_RATE: "double",
}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_LONG_MAX = 9223372036854775807
INACTIVE_SENSOR_EXPIRY_MS = 3600 * 1000  # Kafka: purge sensors after 1 hour of inactivity

Clock = Callable[[], int]  # milliseconds


def wall_clock_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# --------------------------------------------------------------------------- entities


# The largest throttle a response can carry (throttle_time_ms is an int32 on the wire).
MAX_THROTTLE_MS = 2**31 - 1


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """`user`/`client_id`: absent (`present=False`), the default (None) or a name."""

    user: str | None = None
    client_id: str | None = None
    has_user: bool = False
    has_client_id: bool = False

    @classmethod
    def of(cls, entries: Mapping[str, str | None]) -> QuotaEntity:
        return cls(
            user=entries.get(USER),
            client_id=entries.get(CLIENT_ID),
            has_user=USER in entries,
            has_client_id=CLIENT_ID in entries,
        )

    def entries(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        if self.has_user:
            out[USER] = self.user
        if self.has_client_id:
            out[CLIENT_ID] = self.client_id
        return out

    def __str__(self) -> str:
        parts = []
        if self.has_user:
            parts.append(f"user {self.user if self.user is not None else '<default>'}")
        if self.has_client_id:
            parts.append(
                f"client-id {self.client_id if self.client_id is not None else '<default>'}"
            )
        return " ".join(parts)


def _e(user: object = ..., client_id: object = ...) -> QuotaEntity:
    return QuotaEntity(
        user=None if user is ... else user,  # type: ignore[arg-type]
        client_id=None if client_id is ... else client_id,  # type: ignore[arg-type]
        has_user=user is not ...,
        has_client_id=client_id is not ...,
    )


# --------------------------------------------------------------------------- rate


class Rate:
    """Kafka's `Rate` over a `WindowedSum` (SampledStat): `samples` windows of `window_ms`,
    plus one overlapping sample, so the measured window never collapses to a single fresh
    sample."""

    __slots__ = ("samples", "window_ms", "_starts", "_last", "_values", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[int] = []
        self._last: list[int] = []
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._starts:
            self._new(now_ms)
        i = self._current
        if now_ms - self._starts[i] >= self.window_ms:
            i = self._advance(now_ms)
        self._values[i] += value
        self._last[i] = now_ms

    def _new(self, now_ms: int) -> None:
        self._starts.append(now_ms)
        self._last.append(now_ms)
        self._values.append(0.0)

    def _advance(self, now_ms: int) -> int:
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._starts):
            self._new(now_ms)
        else:
            i = self._current
            self._starts[i] = self._last[i] = now_ms
            self._values[i] = 0.0
        return self._current

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for i in range(len(self._starts)):
            if now_ms - self._last[i] >= expire:
                self._starts[i] = self._last[i] = now_ms
                self._values[i] = 0.0

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        oldest = min(self._starts) if self._starts else now_ms
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        total = sum(self._values)
        return total / (self.window_size_ms(now_ms) / 1000.0)


# --------------------------------------------------------------------------- managers


class ClientQuotaManager:
    """One quota key (e.g. producer_byte_rate): the configured values, Kafka's resolution
    of which value applies and which clients share a rate, and the per-client rates."""

    def __init__(
        self,
        key: str,
        clock: Clock,
        samples: int = 11,
        window_s: int = 1,
        max_throttle_ms: int | None = None,
    ) -> None:
        self.key = key
        self.clock = clock
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = max_throttle_ms
        self._quotas: dict[QuotaEntity, float] = {}
        self._sensors: dict[tuple[str, str], tuple[Rate, list[int]]] = {}
        self._records = 0

    @property
    def enabled(self) -> bool:
        return bool(self._quotas)

    def set_quotas(self, quotas: Mapping[QuotaEntity, float]) -> None:
        """Replace the configured values (a store change); rates already measured are kept."""
        self._quotas = dict(quotas)

    # Kafka's DefaultQuotaCallback.quotaMetricTags (general case)
    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        q = self._quotas
        if _e(user, client_id) in q or _e(user, None) in q:
            return user, client_id
        if _e(user) in q:
            return user, ""
        if _e(None, client_id) in q or _e(None, None) in q:
            return user, client_id
        if _e(None) in q:
            return user, ""
        return "", client_id

    # Kafka's DefaultQuotaCallback.quotaLimit
    def quota_limit(self, tags: tuple[str, str]) -> float | None:
        user, client_id = tags
        q = self._quotas
        if user and client_id:
            order = [_e(user, client_id), _e(user, None), _e(None, client_id), _e(None, None)]
        elif user:
            order = [_e(user), _e(None)]
        elif client_id:
            order = [_e(client_id=client_id), _e(client_id=None)]
        else:
            return None
        for ent in order:
            v = q.get(ent)
            if v is not None:
                return v
        return None

    def quota(self, principal: KafkaPrincipal, client_id: str) -> float | None:
        """The bound that applies to this client (None: unlimited)."""
        return self.quota_limit(self.metric_tags(principal.name, client_id))

    def _sensor(self, tags: tuple[str, str], now_ms: int) -> Rate:
        s = self._sensors.get(tags)
        if s is None:
            s = (Rate(self.samples, self.window_ms), [now_ms])
            self._sensors[tags] = s
        s[1][0] = now_ms
        self._records += 1
        if self._records % 4096 == 0:
            self.expire(now_ms)
        return s[0]

    def record_and_get_throttle_time_ms(
        self, principal: KafkaPrincipal, client_id: str, value: float, now_ms: int | None = None
    ) -> int:
        """Record `value` (bytes, or request-thread percentage) for this client now and
        return how long to throttle it (0 when within quota or no quota applies)."""
        if not self._quotas:
            return 0
        now = self.clock() if now_ms is None else now_ms
        tags = self.metric_tags(principal.name, client_id)
        bound = self.quota_limit(tags)
        rate = self._sensor(tags, now)
        rate.record(value, now)
        if bound is None:
            return 0
        observed = rate.measure(now)
        if observed <= bound:
            return 0
        # In floats, bounded before any int(): a tiny bound (5e-324 is a valid double, and
        # AlterClientQuotas takes any positive one) makes the ratio infinite, which round()
        # cannot convert; the wire's throttle_time_ms is an int32 anyway.
        throttle = (observed - bound) / bound * rate.window_size_ms(now)
        cap = MAX_THROTTLE_MS if self.max_throttle_ms is None \
            else min(self.max_throttle_ms, MAX_THROTTLE_MS)
        if not throttle < cap:  # also infinity and NaN
            return cap
        return round(throttle)

    def unrecord(
        self, principal: KafkaPrincipal, client_id: str, value: float, now_ms: int | None = None
    ) -> None:
        """Take back a recorded value (a throttled Fetch is answered empty, as in Kafka)."""
        if not self._quotas:
            return
        now = self.clock() if now_ms is None else now_ms
        self._sensor(self.metric_tags(principal.name, client_id), now).record(-value, now)

    def max_value_in_quota_window(self, principal: KafkaPrincipal, client_id: str) -> float:
        """The most that can be recorded without certain throttling (caps a Fetch's size)."""
        bound = self.quota(principal, client_id) if self._quotas else None
        if bound is None:
            return math.inf
        return bound * (self.samples - 1) * (self.window_ms / 1000.0)

    def expire(self, now_ms: int) -> None:
        """Forget rates of clients idle for an hour (bounded memory with many client ids)."""
        stale = [
            t
            for t, (_, last) in self._sensors.items()
            if now_ms - last[0] >= INACTIVE_SENSOR_EXPIRY_MS
        ]
        for t in stale:
            del self._sensors[t]

    def sensor_count(self) -> int:
        return len(self._sensors)


class _TokenBucket:
    """Kafka's TokenBucket: refills at `rate` per second up to `samples * window` seconds
    worth; goes negative when a mutation takes more than is left."""

    __slots__ = ("tokens", "last_ms")

    def __init__(self, burst: float, now_ms: int) -> None:
        self.tokens = burst
        self.last_ms = now_ms

    def refill(self, rate: float, burst: float, now_ms: int) -> float:
        self.tokens = min(burst, self.tokens + rate * (now_ms - self.last_ms) / 1000.0)
        self.last_ms = now_ms
        return self.tokens


class ControllerMutationQuotaManager(ClientQuotaManager):
    """`controller_mutation_rate` (KIP-599): partitions created or deleted per second.
    Strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): once the bucket is
    empty the request's topics fail with THROTTLING_QUOTA_EXCEEDED and a throttle time;
    permissive (older versions): accepted, but the response is throttled."""

    def __init__(self, clock: Clock, samples: int = 11, window_s: int = 1) -> None:
        super().__init__(CONTROLLER_MUTATION_RATE, clock, samples, window_s)
        self._buckets: dict[tuple[str, str], tuple[_TokenBucket, list[int]]] = {}

    def _bucket(self, tags: tuple[str, str], rate: float, now: int) -> _TokenBucket:
        burst = self.samples * (self.window_ms / 1000.0) * rate
        b = self._buckets.get(tags)
        if b is None:
            b = (_TokenBucket(burst, now), [now])
            self._buckets[tags] = b
        b[1][0] = now
        b[0].refill(rate, burst, now)
        return b[0]

    def record_mutations(
        self,
        principal: KafkaPrincipal,
        client_id: str,
        permits: float,
        *,
        strict: bool,
        now_ms: int | None = None,
    ) -> int:
        """Take `permits` (partitions) now. Strict: raise ThrottlingQuotaExceededError
        (carrying `throttle_time_ms`) if the bucket is already empty, else take them even if
        it goes negative. Permissive: always take; return the throttle time (0 if none)."""
        if not self._quotas:
            return 0
        now = self.clock() if now_ms is None else now_ms
        tags = self.metric_tags(principal.name, client_id)
        rate = self.quota_limit(tags)
        if rate is None:
            return 0
        bucket = self._bucket(tags, rate, now)
        if strict and bucket.tokens < 0:
            err = ThrottlingQuotaExceededError("The throttling quota has been exceeded.")
            err.throttle_time_ms = round(-bucket.tokens / rate * 1000)  # type: ignore[attr-defined]
            raise err
        bucket.tokens -= permits
        if bucket.tokens < 0:
            return round(-bucket.tokens / rate * 1000)
        return 0

    def expire(self, now_ms: int) -> None:
        super().expire(now_ms)
        stale = [
            t
            for t, (_, last) in self._buckets.items()
            if now_ms - last[0] >= INACTIVE_SENSOR_EXPIRY_MS
        ]
        for t in stale:
            del self._buckets[t]


# --------------------------------------------------------------------------- store


class QuotaStore(Protocol):
    """Where quota configs live (local file now; etcd in a cluster, same two calls)."""

    def load(self) -> dict[QuotaEntity, dict[str, float]]: ...

    def apply(self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        """Set (float) or remove (None) keys per entity, atomically and durably."""
        ...


def merge_quotas(
    current: dict[QuotaEntity, dict[str, float]],
    changes: Mapping[QuotaEntity, Mapping[str, float | None]],
) -> dict[QuotaEntity, dict[str, float]]:
    new = {k: dict(v) for k, v in current.items()}
    for ent, ops in changes.items():
        vals = new.setdefault(ent, {})
        for key, value in ops.items():
            if value is None:
                vals.pop(key, None)
            else:
                vals[key] = value
        if not vals:
            del new[ent]
    return new


class MemoryQuotaStore:
    def __init__(self) -> None:
        self._data: dict[QuotaEntity, dict[str, float]] = {}

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        return {k: dict(v) for k, v in self._data.items()}

    def apply(self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        self._data = merge_quotas(self._data, changes)


class FileQuotaStore(MemoryQuotaStore):
    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        if self.path.exists():
            try:
                self._data = decode_quotas(self.path.read_bytes())
            except (OSError, ValueError) as e:
                raise ValueError(f"cannot read quota file {self.path}: {e}") from None
        return super().load()

    def apply(self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        new = merge_quotas(self._data, changes)
        atomic_write(self.path, encode_quotas(new))
        self._data = new


def encode_quotas(data: Mapping[QuotaEntity, Mapping[str, float]]) -> bytes:
    """The stored form: the file's and the cluster document's."""
    doc = {
        "version": 1,
        "entities": [
            {"entity": ent.entries(), "quotas": dict(vals)}
            for ent, vals in sorted(data.items(), key=lambda kv: str(kv[0]))
        ],
    }
    return json.dumps(doc, indent=1).encode()


def decode_quotas(data: bytes) -> dict[QuotaEntity, dict[str, float]]:
    """ValueError (one line) if `data` is not what `encode_quotas` writes."""
    try:
        return {
            QuotaEntity.of(e["entity"]): {k: float(v) for k, v in e["quotas"].items()}
            for e in json.loads(data)["entities"]
        }
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a quota document: {e}") from None


# --------------------------------------------------------------------------- the part


@dataclass(frozen=True)
class AlterEntry:
    entity: Sequence[tuple[str, str | None]]  # (entity type, name or None for default)
    ops: Sequence[tuple[str, float, bool]]  # (key, value, remove)


@dataclass(frozen=True)
class AlterResult:
    entity: Sequence[tuple[str, str | None]]
    error_code: int
    error_message: str | None


class ClientQuotas:
    """The quota part the broker composes: managers per key, the store, and the
    DescribeClientQuotas / AlterClientQuotas semantics (Kafka's ClientQuotaControlManager
    and ClientQuotasImage). IP entities (`connection_creation_rate`) are not supported:
    altering one is refused with INVALID_REQUEST rather than silently ignored."""

    def __init__(
        self,
        store: QuotaStore,
        *,
        clock: Clock = wall_clock_ms,
        samples: int = 11,
        window_s: int = 1,
        controller_samples: int = 11,
        controller_window_s: int = 1,
    ) -> None:
        self.store = store
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, clock, samples, window_s)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, clock, samples, window_s)
        # Kafka caps request-quota throttling at one window.
        self.request = ClientQuotaManager(
            REQUEST_PERCENTAGE, clock, samples, window_s, max_throttle_ms=window_s * 1000
        )
        self.controller_mutation = ControllerMutationQuotaManager(
            clock, controller_samples, controller_window_s
        )
        self._by_key: dict[str, ClientQuotaManager] = {
            PRODUCER_BYTE_RATE: self.produce,
            CONSUMER_BYTE_RATE: self.fetch,
            REQUEST_PERCENTAGE: self.request,
            CONTROLLER_MUTATION_RATE: self.controller_mutation,
        }
        self._data: dict[QuotaEntity, dict[str, float]] = {}
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, str], store: QuotaStore, clock: Clock = wall_clock_ms
    ) -> ClientQuotas:
        from yak.security.settings import get_setting

        return cls(
            store,
            clock=clock,
            samples=get_setting(settings, "quota.window.num"),
            window_s=get_setting(settings, "quota.window.size.seconds"),
            controller_samples=get_setting(settings, "controller.quota.window.num"),
            controller_window_s=get_setting(settings, "controller.quota.window.size.seconds"),
        )

    def load(self) -> None:
        self.on_store_change(self.store.load())

    def on_store_change(self, data: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Apply the whole stored configuration (start-up, or an etcd watch)."""
        self._data = {k: dict(v) for k, v in data.items()}
        for key, mgr in self._by_key.items():
            mgr.set_quotas({ent: vals[key] for ent, vals in self._data.items() if key in vals})

    def maintenance(self, now_ms: int) -> None:
        for mgr in self._by_key.values():
            mgr.expire(now_ms)

    # ---------------------------------------------------------------- describe

    def describe(
        self, components: Sequence[tuple[str, int, str | None]], strict: bool
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """DescribeClientQuotas: components are (entity type, match type, match)."""
        exact: dict[str, str | None] = {}
        typed: set[str] = set()
        for etype, mtype, match in components:
            if not etype:
                raise InvalidRequestError("Invalid empty entity type.")
            if etype in exact or etype in typed:
                raise InvalidRequestError(
                    f"Entity type {etype} cannot appear more than once in the filter."
                )
            if etype not in (IP, USER, CLIENT_ID):
                raise UnsupportedVersionError(f"Unsupported entity type {etype}")
            if mtype == MATCH_EXACT:
                if match is None:
                    raise InvalidRequestError(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null."
                    )
                exact[etype] = match
            elif mtype == MATCH_DEFAULT:
                if match is not None:
                    raise InvalidRequestError(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                    )
                exact[etype] = None
            elif mtype == MATCH_SPECIFIED:
                if match is not None:
                    raise InvalidRequestError(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                    )
                typed.add(etype)
            else:
                raise InvalidRequestError(f"Unknown match type {mtype}")
        if (IP in exact or IP in typed) and (
            exact.keys() & {USER, CLIENT_ID} or typed & {USER, CLIENT_ID}
        ):
            raise InvalidRequestError(
                "Invalid entity filter component combination. IP filter component should not "
                "be used with user or clientId filter component."
            )
        out = []
        for ent, vals in self._data.items():
            entries = ent.entries()
            if strict and len(entries) != len(exact) + len(typed):
                continue
            if any(t not in entries or entries[t] != v for t, v in exact.items()):
                continue
            if any(t not in entries for t in typed):
                continue
            out.append((entries, dict(vals)))
        return out

    # ---------------------------------------------------------------- alter

    async def alter(
        self, entries: Sequence[AlterEntry], validate_only: bool = False
    ) -> list[AlterResult]:
        """AlterClientQuotas: one result per distinct entity; the accepted changes are one
        atomic store write (unless `validate_only`)."""
        async with self._lock:
            results: dict[object, AlterResult] = {}
            changes: dict[QuotaEntity, dict[str, float | None]] = {}
            for entry in entries:
                try:
                    ent = self._validate_entity(entry.entity)
                except KafkaError as e:
                    raw = ("invalid", tuple(entry.entity))
                    results.setdefault(raw, AlterResult(entry.entity, e.code, e.message))
                    continue
                if ent in results:
                    results[ent] = AlterResult(
                        entry.entity, ErrorCode.invalid_request, f"Ignoring duplicate entity {ent}"
                    )
                    changes.pop(ent, None)
                    continue
                try:
                    ops = self._validate_ops(ent, entry.ops)
                except KafkaError as e:
                    results[ent] = AlterResult(entry.entity, e.code, e.message)
                    continue
                results[ent] = AlterResult(entry.entity, ErrorCode.none, None)
                if ops:
                    changes[ent] = ops
            if changes and not validate_only:
                try:
                    await asyncio.to_thread(self.store.apply, changes)
                except Exception as e:  # noqa: BLE001 - answered; nothing changed
                    for ent in changes:
                        results[ent] = AlterResult(
                            results[ent].entity,
                            ErrorCode.unknown_server_error,
                            f"cannot store quotas: {e}",
                        )
                    return list(results.values())
                self.on_store_change(merge_quotas(self._data, changes))
            return list(results.values())

    @staticmethod
    def _validate_entity(entity: Sequence[tuple[str, str | None]]) -> QuotaEntity:
        if not entity:
            raise InvalidRequestError("Invalid empty client quota entity")
        seen: dict[str, str | None] = {}
        for etype, name in entity:
            if etype in seen:
                raise InvalidRequestError(
                    f"Invalid client quota entity, duplicate entity entry {etype}"
                )
            if etype == IP:
                raise InvalidRequestError(
                    "IP quotas (connection_creation_rate) are not supported by Yak"
                )
            if etype not in (USER, CLIENT_ID):
                raise InvalidRequestError(f"Unhandled client quota entity type: {etype}")
            seen[etype] = name
        return QuotaEntity.of(seen)

    def _validate_ops(
        self, ent: QuotaEntity, ops: Iterable[tuple[str, float, bool]]
    ) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        current = self._data.get(ent, {})
        for key, value, remove in ops:
            if key in out:
                raise InvalidRequestError(
                    f"Duplicate quota key {key} not updating quota for this entity {ent}"
                )
            if remove:
                out[key] = None
                continue
            ktype = QUOTA_KEYS.get(key)
            if ktype is None:
                raise InvalidRequestError(f"Invalid configuration key {key}")
            if not value > 0.0:
                raise InvalidRequestError(f"Quota {key} must be greater than 0")
            if ktype == "long":
                if value > _LONG_MAX:
                    raise InvalidRequestError(f"Proposed value for {key} is too large for a LONG.")
                if abs(value % 1.0) > 1e-6:
                    raise InvalidRequestError(f"{key} cannot be a fractional value.")
            out[key] = value
        # removing a key that is not set, or setting the same value, changes nothing
        return {
            k: v
            for k, v in out.items()
            if (v is None and k in current) or (v is not None and current.get(k) != v)
        }


__all__ += [
    "AlterEntry",
    "AlterResult",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "MATCH_SPECIFIED",
    "wall_clock_ms",
]
