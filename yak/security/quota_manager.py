"""Client quota enforcement: Kafka's rate measurement and throttle time per quota key,
with an injectable clock.

The quota that applies to a connection is the most specific one set, in Kafka's order:
  user+client-id, user+default client-id, user, default user+client-id,
  default user+default client-id, default user, client-id, default client-id.
Which clients share one measured rate follows Kafka too: a `user` quota is shared by all
of that user's client ids; a *default* quota is per user (or per client id), not global.

Rates are Kafka's sampled windows (`quota.window.num` samples of
`quota.window.size.seconds`): a value recorded now makes the rate
`sum(samples) / elapsed`, with the elapsed time at least (samples - 1) full windows; over the
bound, the throttle time is `(rate - bound) / bound * window` -- how long the client must
stay silent for the rate to fall back to the bound (KIP-13, KIP-219). The broker answers
with that `throttle_time_ms` and then does not read from the connection for that long.
`controller_mutation_rate` is a token bucket instead (KIP-599).

One `ClientQuotaManager` per key; `quota.ClientQuotas` composes them with the store.
Nothing here sleeps or reads a clock of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from yak.errors import ThrottlingQuotaExceededError
from yak.security.principal import KafkaPrincipal
from yak.security.quota_store import CONTROLLER_MUTATION_RATE, QuotaEntity

__all__ = [
    "INACTIVE_SENSOR_EXPIRY_MS",
    "MAX_THROTTLE_MS",
    "Clock",
    "ClientQuotaManager",
    "ControllerMutationQuotaManager",
    "Rate",
]

INACTIVE_SENSOR_EXPIRY_MS = 3600 * 1000  # Kafka: purge sensors after 1 hour of inactivity
# The largest throttle a response can carry (throttle_time_ms is an int32 on the wire).
MAX_THROTTLE_MS = 2**31 - 1

Clock = Callable[[], int]  # milliseconds


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
