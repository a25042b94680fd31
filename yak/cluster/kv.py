"""The metadata key-value interface, and the one place that picks its backend.

Everything in `yak/cluster/` that keeps metadata (the image `etcd_store.py`, the
registration `membership.py`, the controller election `controller.py`, the lease keeper
`lease.py`, `prefix_view.py`, `identity.py`) talks to a `KVClient`: the part of etcd's v3
API they need. It has two implementations:

- `yak.cluster.etcd.EtcdClient`: a cluster's etcd (`metadata.store=etcd://HOST:PORT[/NAME]`);
- `yak.cluster.local_kv.LocalKV`: the embedded default (`metadata.store=local`), in this
  process and in a file of the data directory, for a one-node cluster.

So a single broker and a cluster differ in this choice alone (`open_kv`), and nowhere else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from yak.cluster.etcd import Compare, KeyValue, Op, RangeResult, TxnResult, WatchResponse

__all__ = ["KVClient", "KVWatch", "LOCAL_STORE", "open_kv"]

LOCAL_STORE = "local"


class KVWatch(Protocol):
    """A watch: iterate for `WatchResponse`s (a `snapshot` one replaces what the watcher
    knew, after a compaction); `close()` ends it."""

    key: str
    next_revision: int
    reconnects: int

    def close(self) -> None: ...

    def __aiter__(self) -> AsyncIterator[WatchResponse]: ...


class KVClient(Protocol):
    """etcd's KV, transaction, lease and watch calls, as `yak.cluster.etcd` defines them."""

    endpoints: list[str]
    timeout: float
    connect_timeout: float

    async def range(self, key: str, *, prefix: bool = False, range_end: bytes | None = None,
                    revision: int = 0, limit: int = 0, keys_only: bool = False
                    ) -> RangeResult: ...

    async def get(self, key: str) -> KeyValue | None: ...

    async def put(self, key: str, value: bytes | str, *, lease: int = 0) -> int: ...

    async def delete(self, key: str, *, prefix: bool = False) -> int: ...

    async def txn(self, compares: Iterable[Compare], success: Iterable[Op] = (),
                  failure: Iterable[Op] = ()) -> TxnResult: ...

    async def lease_grant(self, ttl_s: int, lease_id: int = 0) -> tuple[int, int]: ...

    async def lease_keepalive(self, lease_id: int, timeout: float | None = None) -> int: ...

    async def lease_revoke(self, lease_id: int) -> None: ...

    async def lease_ttl(self, lease_id: int) -> int: ...

    def watch(self, key: str, *, prefix: bool = False, start_revision: int = 0,
              idle_timeout: float = ...) -> KVWatch: ...

    def for_thread(self) -> KVClient:
        """A client usable from another thread's event loop (the lease keeper's)."""
        ...

    async def aclose(self) -> None: ...


def open_kv(metadata_store: str, data_dir: str | Path, *, etcd_timeout_s: float = 5.0
            ) -> tuple[KVClient, str, Sequence[str]]:
    """The backend `metadata.store` names: (client, cluster namespace, endpoints for
    messages). `local` is the data directory's file (opened by `LocalKV.open`); an
    `etcd://` URL is an etcd client (ValueError, one line, for a malformed one)."""
    from yak.cluster.layout import DEFAULT_NAMESPACE, parse_metadata_url

    if metadata_store == LOCAL_STORE:
        from yak.cluster.local_kv import KV_FILE, LocalKV

        local = LocalKV(Path(data_dir) / KV_FILE)
        return local, DEFAULT_NAMESPACE, local.endpoints
    from yak.cluster.etcd import EtcdClient

    endpoints, namespace = parse_metadata_url(metadata_store)
    client = EtcdClient(endpoints, timeout=etcd_timeout_s)
    return client, namespace, client.endpoints
