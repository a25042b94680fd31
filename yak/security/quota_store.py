"""Client quota configs: Kafka's entities and keys, and the `QuotaStore` they live in.

Entities (Kafka's ClientQuotaEntity): `user`, `client-id`, or both, each a name or the
default (None). Keys: `producer_byte_rate`, `consumer_byte_rate` (bytes/s),
`request_percentage` (percent of one request-handling thread), `controller_mutation_rate`
(partitions created/deleted per second).

The stored form (`encode_quotas`/`decode_quotas`) is the quota file's and the cluster
document's (`cluster_stores.py`); `merge_quotas` applies one AlterClientQuotas' changes.
Which value applies to a client, and its throttle, are `quota_manager.py`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from yak.security._files import atomic_write

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "IP",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "FileQuotaStore",
    "MemoryQuotaStore",
    "QuotaEntity",
    "QuotaStore",
    "decode_quotas",
    "encode_quotas",
    "merge_quotas",
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
