"""Client quotas, the part the broker composes: one manager per quota key, the store, and
Kafka's DescribeClientQuotas / AlterClientQuotas semantics.

The model and the store are `quota_store.py`'s (entities, keys, the stored form); the
rates and throttle times `quota_manager.py`'s (which value applies to a client, Kafka's
sampled windows, the controller-mutation token bucket). `ClientQuotas` ties them: a store
change (start-up, an AlterClientQuotas, a watch) sets every manager's values; handlers ask
the managers for throttle times through it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from yak.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    UnsupportedVersionError,
)
from yak.security.quota_manager import ClientQuotaManager, Clock, ControllerMutationQuotaManager
from yak.security.quota_store import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    USER,
    QuotaEntity,
    QuotaStore,
    merge_quotas,
)

__all__ = [
    "AlterEntry",
    "AlterResult",
    "ClientQuotas",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "MATCH_SPECIFIED",
    "wall_clock_ms",
]

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_LONG_MAX = 9223372036854775807


def wall_clock_ms() -> int:
    return time.monotonic_ns() // 1_000_000


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
