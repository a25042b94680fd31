"""Share group configs: which keys there are and their bounds (`check_group_config`), and
where they live, durable and cluster-wide: one document per group in the metadata store
(`group_configs/<group id>`), as Kafka keeps a GROUP resource's configs in its metadata
log.

Why: a group's `share.auto.offset.reset`, delivery limit, lock duration, dead-letter
topic and redelivery delay must hold on every broker (the leaders of the group's
partitions are anywhere in the cluster) and after restarts. The store is the one
metadata path's (`KVClient`: etcd in a cluster, the data dir's local KV for a single
broker), handed in by the composition (this layer never imports the cluster). Reads are
of the local image (no I/O), decoded once per revision; a write is compare-and-set on
the document's revision, retried when another broker wrote first, and returns once this
broker's image has it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = [
    "DLQ_TOPIC",
    "GROUP_CONFIG_KEYS",
    "DocumentStore",
    "GroupConfigStore",
    "InvalidGroupConfig",
    "check_group_config",
    "document_name",
]

GROUP_CONFIG_KEYS = ("share.auto.offset.reset", "share.isolation.level",
                     "share.record.lock.duration.ms", "share.delivery.count.limit",
                     "share.session.timeout.ms", "share.heartbeat.interval.ms",
                     # ahead of Kafka (issue 24): KIP-1191's dead-letter topic, and a delay
                     # before a released or expired record is handed out again
                     "errors.deadletterqueue.topic.name", "share.record.redelivery.delay.ms")
DLQ_TOPIC = "errors.deadletterqueue.topic.name"
MAX_REDELIVERY_DELAY_MS = 3_600_000


class InvalidGroupConfig(Exception):
    """A group config outside the broker's bounds (INVALID_CONFIG)."""


def check_group_config(bounds: Any, topics: Callable[[str], tuple[uuid.UUID, int] | None],
                       key: str, value: str | None) -> None:
    """InvalidGroupConfig unless `key` is a share group config and `value` (None: a
    delete) is within the broker's bounds (`bounds`: the ShareConfig of the broker's
    `group.share.*` settings); a dead-letter topic must exist."""
    if key not in GROUP_CONFIG_KEYS:
        raise InvalidGroupConfig(f"unknown group config {key}")
    if value is None:
        return
    c = bounds
    if key == "share.auto.offset.reset":
        if value not in ("latest", "earliest") and not value.startswith("by_duration:"):
            raise InvalidGroupConfig(f"{key}={value}: latest, earliest or by_duration:")
        return
    if key == "share.isolation.level":
        if value not in ("read_uncommitted", "read_committed"):
            raise InvalidGroupConfig(f"{key}={value}")
        return
    if key == DLQ_TOPIC:
        if value.startswith("__") or topics(value) is None:
            raise InvalidGroupConfig(f"{key}={value}: no such topic (create it first)")
        return
    lo, hi = {
        "share.record.lock.duration.ms": (c.min_record_lock_duration_ms,
                                          c.max_record_lock_duration_ms),
        "share.delivery.count.limit": (c.min_delivery_count_limit,
                                       c.max_delivery_count_limit),
        "share.session.timeout.ms": (1, 2**31 - 1),
        "share.heartbeat.interval.ms": (1, 2**31 - 1),
        "share.record.redelivery.delay.ms": (0, MAX_REDELIVERY_DELAY_MS),
    }[key]
    try:
        n = int(value)
    except ValueError:
        raise InvalidGroupConfig(f"{key}={value} is not a number") from None
    if not lo <= n <= hi:
        raise InvalidGroupConfig(f"{key}={value} is outside [{lo}, {hi}]")

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 20


class DocumentStore(Protocol):
    """What the metadata store offers (its documents)."""

    def document(self, name: str) -> tuple[bytes | None, int]: ...

    async def put_document(self, name: str, value: bytes, mod_revision: int) -> bool: ...


def document_name(group_id: str) -> str:
    return f"group_configs/{group_id}"


class GroupConfigStore:
    def __init__(self, store: DocumentStore) -> None:
        self.store = store
        self._cache: dict[str, tuple[int, dict[str, str]]] = {}

    def get(self, group_id: str) -> dict[str, str]:
        """The group's stored configs (the image: no I/O; do not mutate the result)."""
        value, revision = self.store.document(document_name(group_id))
        cached = self._cache.get(group_id)
        if cached is not None and cached[0] == revision:
            return cached[1]
        configs = _decode(group_id, value)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[group_id] = (revision, configs)
        return configs

    async def apply(self, group_id: str, changes: Sequence[tuple[str, str | None]]) -> None:
        """Set (None: delete) each key, in one write."""
        def change(current: dict[str, str]) -> dict[str, str]:
            for key, value in changes:
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            return current

        await self.replace(group_id, change)

    async def replace(self, group_id: str,
                      change: Callable[[dict[str, str]], dict[str, str]]) -> None:
        """Store `change(current)`; re-read and re-applied if another broker wrote first."""
        name = document_name(group_id)
        for _ in range(MAX_ATTEMPTS):
            value, revision = self.store.document(name)
            current = _decode(group_id, value)
            new = change(dict(current))
            if new == current:
                return
            data = json.dumps({"configs": dict(sorted(new.items()))}).encode()
            if await self.store.put_document(name, data, revision):
                return
        raise RuntimeError(f"{name} changed by others {MAX_ATTEMPTS} times in a row")


def _decode(group_id: str, value: bytes | None) -> dict[str, str]:
    if value is None:
        return {}
    try:
        data = json.loads(value)
        configs = data["configs"]
        return {str(k): str(v) for k, v in configs.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        log.error("%s: unreadable group configs document: %s", document_name(group_id), e)
        return {}
