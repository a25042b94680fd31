"""Deleting a deleted topic's remote log (KIP-405's stopPartitions with deleteRemoteLog):
every object under `<topic>-<topic id>/`, retried with backoff until the store answers and a
listing comes back empty. `RemoteLogManager.delete_topic` stops the topic's rounds and runs
this in the background; every broker that hosted a replica does it (deletes are
idempotent). A module of its own so that the manager stays one job's size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from yak.tiered.config import TieredConfig
from yak.tiered.metadata import topic_prefix
from yak.tiered.store import RemoteStorageError, RemoteStore

__all__ = ["delete_remote_topic"]

log = logging.getLogger(__name__)


async def delete_remote_topic(store: RemoteStore, config: TieredConfig, topic: str,
                              topic_id: str, stopping: list[asyncio.Task[None]]) -> None:
    """Wait for the topic's rounds to end (`stopping`: none may upload after the
    listing), then delete every object of the topic: segments first, manifests last."""
    for t in stopping:
        with contextlib.suppress(BaseException):
            await t
    prefix = topic_prefix(topic, topic_id)
    failures = deleted = 0
    while True:
        try:
            keys = [k for k, _size in await store.list(prefix)]
            if not keys:
                break
            # Segments first, manifests last: a deletion cut short leaves a manifest
            # naming what is gone (a reader sees data loss), never objects no manifest
            # names. Then list again: an upload cancelled in flight may still land.
            keys.sort(key=lambda k: "/manifest/" in k)
            await store.delete(keys)
            deleted += len(keys)
            failures = 0
        except RemoteStorageError as e:
            failures += 1
            delay = min(config.retry_backoff_max_ms,
                        config.retry_backoff_ms * 2 ** (failures - 1)) / 1000
            log.warning("%s: deleting the remote log of the deleted topic failed"
                        " (attempt %d, next in %.1fs): %s", topic, failures, delay, e)
            await asyncio.sleep(delay)
    if deleted:
        log.info("%s: deleted topic's remote log removed (%d object(s))", topic, deleted)
