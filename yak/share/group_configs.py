"""Share group configs, durable and cluster-wide: one document per group in the metadata
store (`group_configs/<group id>`), as Kafka keeps a GROUP resource's configs in its
metadata log.

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
from collections.abc import Callable
from typing import Protocol

__all__ = ["DocumentStore", "GroupConfigStore", "document_name"]

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
