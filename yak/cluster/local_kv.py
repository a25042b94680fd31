"""The metadata key-value store of a one-node cluster: etcd's API, in this process, in a file.

Why this exists: a single broker and a cluster run one metadata path (issue 22, Kafka's
KafkaRaftServer runs one code path for one node and for N). The image, the topic manager,
the controller, the registration and the publisher speak the small part of etcd's v3 API
that `yak/cluster/etcd.py` implements (`KVClient`: revisioned range/put/delete,
transactions of compares and operations, nested transactions, watches from a revision,
leases). `LocalKV` is a second implementation of exactly that API, so the embedded default
(`metadata.store=local`) needs nothing installed and a single broker is a one-node cluster.

Why not a blob store: the code above relies on etcd's semantics, not on storage: the
create/mod revisions that are broker and controller epochs, compare-and-set on them, watches
that resume from a revision, keys that vanish with their lease. A file of JSON without them
would need the second code path this replaces.

Why not Raft: this backend has one node and no replication, so it needs no consensus. The
replicated case uses etcd (the project's rule: never a home-made consensus). Nothing here
pretends otherwise: `LocalKV` refuses nothing for lack of a quorum because it has none.

Semantics kept from etcd (the ones the callers depend on, checked against a real etcd by
tests/cluster/test_local_kv.py):
- one store revision, +1 per write request (a transaction's writes share it); every key
  has create_revision, mod_revision, version and lease; a range is answered at a revision;
- compares on value/version/create/mod/lease, a missing key comparing as 0 (a value compare
  on a missing key fails); nested transactions; range ends as etcd's (`prefix_range_end`);
- watches deliver each revision's events in order, from any revision still in the history;
  an older one gets a snapshot of the range (as after etcd's compaction); a DELETE event's
  key-value carries the key and the deletion revision;
- leases expire `ttl` seconds after their last grant or keepalive (whole seconds, at least
  one); their keys are deleted then, or on revoke. Expiry is checked on every call and by
  every waiting watch (at least once a second), so a lease whose keeper stopped is seen
  gone within about a second of its deadline.

Durability: every write request is applied in memory, then the whole state is written to
`<data dir>/__yak_metadata.kv.json` (mode 0600: the SCRAM credentials' salted keys are a
document in it; temp file, fsync, rename, fsync of the directory, in a
worker thread so the event loop never waits on the disk) before the call returns, so an
acknowledged metadata change survives a crash. Keys on leases are not written: their
leases die with the process, as an etcd lease dies with its holder's session. The revision
is written, so revisions (broker and controller epochs) keep growing across restarts.
A crash leaves the file of the last completed rename: all of a transaction or none of it.

Where the file's bytes are built (issue 25): in the writer thread, not on the event loop.
A write request hands the writer its revision's events (`_unwritten`, O(changed) under the
lock); the writer, holding `_persist_lock`, takes every event recorded so far, applies them
to its own image of the file (`_FileImage`: per durable key its JSON, keys in etcd's
order) and writes that image at the store's revision. So a commit costs the loop the same
at 10 keys as at 10,000 (the remote log metadata puts one key per remote segment here;
building the bytes on the loop took 7-14 ms per commit at 1,000 keys and ~20 ms at 10,000,
benchmarks/local_kv_commit.py). The file, its format and its write sequence are unchanged,
so what a crash leaves is unchanged. The writer still rewrites the whole file per write
(O(keys) in that thread, written in chunks so no single step holds the GIL for long). An
append-only log of transactions compacted into the file (etcd's WAL) would make the
writer's work O(changed) too, but it is a new format with a torn-tail rule and a replay at
open; this is the smaller change that takes the cost off the loop, chosen for that.

Why one module of about 700 lines: the key-value state, its file and its watches share one
lock, one revision counter and one publish order; split, each part would reach into the
others' state. Thread safety: one `threading.Lock` guards the state; watch deliveries go to each watch's
own loop with `call_soon_threadsafe`, so the lease keeper's thread (yak/cluster/lease.py)
can renew through the same object (`for_thread()` returns it).
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import collections
import contextlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

from yak.cluster.etcd import (
    Compare,
    EtcdRequestError,
    Event,
    KeyValue,
    LeaseNotFoundError,
    Op,
    RangeResult,
    TxnResult,
    WatchResponse,
    prefix_range_end,
)

__all__ = ["KV_FILE", "LocalKV", "LocalWatch"]

log = logging.getLogger(__name__)

KV_FILE = "__yak_metadata.kv.json"
FORMAT_VERSION = 1
# Revisions of events kept for watches that start in the past (older: a snapshot).
HISTORY_REVISIONS = 10_000
# A waiting watch checks lease expiry at least this often.
EXPIRY_CHECK_S = 1.0


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _kb(key: str) -> bytes:
    return key.encode("utf-8", "surrogateescape")


def _in_range(k: bytes, key: bytes, range_end: bytes | None) -> bool:
    if range_end is None:
        return k == key
    if range_end == b"\x00":
        return k >= key
    return key <= k < range_end


class _Lease:
    __slots__ = ("deadline", "keys", "ttl")

    def __init__(self, ttl: int, deadline: float) -> None:
        self.ttl = ttl
        self.deadline = deadline
        self.keys: set[str] = set()


class _FileImage:
    """The writer thread's image of the file: per durable key (no lease) its JSON, the keys
    in etcd's (byte) order. Only the writer touches it, under `_persist_lock`, so the event
    loop never builds the file; it changes by the events of each revision, as the store did.
    """

    __slots__ = ("_order", "_text")

    # Fragments per write(2) and per join: each join holds the GIL, so a short one.
    CHUNK = 512

    def __init__(self) -> None:
        self._text: dict[bytes, bytes] = {}  # key (bytes) -> its JSON
        self._order: list[bytes] = []  # the keys, sorted

    @staticmethod
    def _encode(kv: KeyValue) -> bytes:
        return json.dumps({"key": kv.key, "value": _b64(kv.value),
                           "create_revision": kv.create_revision,
                           "mod_revision": kv.mod_revision, "version": kv.version},
                          separators=(",", ":")).encode()

    def load(self, kvs: Iterable[KeyValue]) -> None:
        """At open: the keys the file held (none has a lease then)."""
        self._text = {_kb(kv.key): self._encode(kv) for kv in kvs if not kv.lease}
        self._order = sorted(self._text)

    def apply(self, events: Iterable[Event]) -> None:
        """One revision's events, in order: a put without a lease is written, a delete or a
        put on a lease (the key now dies with its lease) is not."""
        for e in events:
            kb = _kb(e.kv.key)
            if e.type == "PUT" and not e.kv.lease:
                if kb not in self._text:
                    bisect.insort(self._order, kb)
                self._text[kb] = self._encode(e.kv)
            elif self._text.pop(kb, None) is not None:
                del self._order[bisect.bisect_left(self._order, kb)]

    def chunks(self, revision: int, next_lease: int) -> Iterable[bytes]:
        """The file's bytes, in pieces: the same document `open_sync` reads."""
        head = json.dumps({"version": FORMAT_VERSION, "revision": revision,
                           "next_lease": next_lease}, separators=(",", ":"))
        yield (head[:-1] + ',"kvs":[').encode()
        text, order = self._text, self._order
        for i in range(0, len(order), self.CHUNK):
            piece = b",".join([text[k] for k in order[i:i + self.CHUNK]])
            yield piece if i == 0 else b"," + piece
        yield b"]}"


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked (a signal, a full disk's last blocks)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class LocalKV:
    """etcd's KV, lease and watch API for one process, kept in `path` (see the module doc).

    Call `await open()` (or use `LocalKV.open_sync`) before anything else.
    """

    def __init__(self, path: str | Path, *, clock: Any = time.monotonic) -> None:
        self.path = Path(path)
        self.endpoints = [f"local:{self.path}"]  # what messages name, as EtcdClient's
        self.timeout = 5.0
        self.connect_timeout = 1.0
        self._clock = clock
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._kvs: dict[str, KeyValue] = {}
        self._sorted: list[bytes] = []  # the keys, as bytes, sorted (etcd's order)
        self._revision = 0
        self._compact_revision = 0  # watches from at or below this get a snapshot
        self._history: collections.deque[tuple[int, list[Event]]] = collections.deque()
        # Applied but not yet in the file: published to watches once written (etcd too
        # notifies watchers of committed revisions only).
        self._pending: collections.deque[tuple[int, list[Event]]] = collections.deque()
        self._leases: dict[int, _Lease] = {}
        self._next_lease = 0
        self._watches: list[LocalWatch] = []
        # Each revision's events since the writer last took them (see the module doc).
        self._unwritten: list[list[Event]] = []
        self._image = _FileImage()  # the writer's, under `_persist_lock`
        self._written = 0  # the revision the file holds
        self._opened = False

    # ------------------------------------------------------------------ life cycle

    def open_sync(self) -> LocalKV:
        """Read the file (or start empty). Synchronous: for start-up in a worker thread."""
        if self._opened:
            return self
        try:
            doc = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            doc = None
        except ValueError as e:
            raise ValueError(f"{self.path}: not a metadata store ({e})") from None
        if doc is not None:
            if int(doc.get("version", 0)) != FORMAT_VERSION:
                raise ValueError(f"{self.path}: unknown format version {doc.get('version')!r}")
            self._revision = int(doc["revision"])
            for d in doc["kvs"]:
                kv = KeyValue(d["key"], _unb64(d["value"]), int(d["create_revision"]),
                              int(d["mod_revision"]), int(d["version"]), 0)
                self._kvs[kv.key] = kv
            self._sorted = sorted(_kb(k) for k in self._kvs)
            self._next_lease = int(doc.get("next_lease", 0))
            self._image.load(self._kvs.values())
        # The history of a previous process is gone: a watch from before now is a snapshot.
        self._compact_revision = self._revision
        self._written = self._revision
        self._opened = True
        return self

    def load_initial(self, items: dict[str, bytes]) -> int:
        """Fill an empty store in one revision and write it (synchronous: start-up
        migrations, in a worker thread). One rename makes all of it appear or none of
        it, so a crash mid-migration leaves the store empty and the migration runs again."""
        with self._lock:
            if self._kvs or self._revision:
                raise ValueError(f"{self.path}: load_initial on a store that is not empty")
            rev = self._revision = 1
            events: list[Event] = []
            for key, value in items.items():
                self._put_key(key, value, 0, rev, events)
            self._unwritten.append(events)
        self._write_file(rev)
        self._compact_revision = rev
        return rev

    def is_empty(self) -> bool:
        return not self._kvs and not self._revision

    async def open(self) -> LocalKV:
        return await asyncio.to_thread(self.open_sync)

    def for_thread(self) -> LocalKV:
        """A client for another thread's event loop: this object (it is thread-safe)."""
        return self

    async def aclose(self) -> None:
        for w in list(self._watches):
            w.close()

    async def __aenter__(self) -> LocalKV:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def revision(self) -> int:
        return self._revision

    # ------------------------------------------------------------------ persistence

    def _write_file(self, revision: int) -> None:
        """Make `revision` durable: write the file at the store's current revision (at
        least `revision`; a later one covers it), unless a writer did already. In a worker
        thread (or the lease keeper's): the file is built and written here, never on the
        event loop."""
        with self._persist_lock:
            if revision <= self._written:
                return  # a later state was written already
            with self._lock:  # O(changed): what the writes since the last file changed
                changes, self._unwritten = self._unwritten, []
                revision, next_lease = self._revision, self._next_lease
            for events in changes:
                self._image.apply(events)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.fchmod(fd, 0o600)  # it holds the SCRAM credentials' keys: owner only
                for piece in self._image.chunks(revision, next_lease):
                    _write_all(fd, piece)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            self._written = revision

    async def _persist(self, revision: int | None) -> None:
        """Return once `revision` (None: nothing written) is in the file, then publish."""
        if revision is not None:
            await asyncio.to_thread(self._write_file, revision)
            self._publish()

    def _persist_sync(self, revision: int | None) -> None:
        if revision is not None:
            self._write_file(revision)
            self._publish()

    def _publish(self) -> None:
        """Hand the written revisions' events to the watches, in revision order."""
        with self._lock:
            while self._pending and self._pending[0][0] <= self._written:
                rev, events = self._pending.popleft()
                self._history.append((rev, events))
                for w in list(self._watches):
                    w._deliver(rev, events)
            while len(self._history) > HISTORY_REVISIONS:
                old_rev, _ = self._history.popleft()
                self._compact_revision = old_rev

    # ------------------------------------------------------------------ the state machine

    def _range(self, key: bytes, range_end: bytes | None) -> list[KeyValue]:
        if range_end is None:
            kv = self._kvs.get(key.decode("utf-8", "surrogateescape"))
            return [kv] if kv is not None else []
        i = bisect.bisect_left(self._sorted, key)
        out = []
        for k in self._sorted[i:]:
            if range_end != b"\x00" and k >= range_end:
                break
            out.append(self._kvs[k.decode("utf-8", "surrogateescape")])
        return out

    def _expire_locked(self, events: list[Event]) -> None:
        now = self._clock()
        for lease_id in [i for i, le in self._leases.items() if le.deadline <= now]:
            self._revoke_locked(lease_id, events)

    def _revoke_locked(self, lease_id: int, events: list[Event]) -> bool:
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return False
        if lease.keys:
            rev = self._revision + 1
            for key in sorted(lease.keys):
                self._delete_key(key, rev, events)
            self._revision = rev
            self._record([e for e in events if e.kv.mod_revision == rev], rev)
        return True

    def _delete_key(self, key: str, rev: int, events: list[Event]) -> None:
        kv = self._kvs.pop(key, None)
        if kv is None:
            return
        kb = _kb(key)
        i = bisect.bisect_left(self._sorted, kb)
        del self._sorted[i]
        if kv.lease and kv.lease in self._leases:
            self._leases[kv.lease].keys.discard(key)
        events.append(Event("DELETE", KeyValue(key, b"", 0, rev, 0, 0)))

    def _put_key(self, key: str, value: bytes, lease: int, rev: int,
                 events: list[Event]) -> None:
        old = self._kvs.get(key)
        if lease and lease not in self._leases:
            raise LeaseNotFoundError("etcdserver: requested lease not found", 5)
        if old is None:
            bisect.insort(self._sorted, _kb(key))
            kv = KeyValue(key, value, rev, rev, 1, lease)
        else:
            if old.lease and old.lease != lease and old.lease in self._leases:
                self._leases[old.lease].keys.discard(key)
            kv = KeyValue(key, value, old.create_revision, rev, old.version + 1, lease)
        if lease:
            self._leases[lease].keys.add(key)
        self._kvs[key] = kv
        events.append(Event("PUT", kv))

    def _compare(self, c: dict[str, Any]) -> bool:
        kv = self._kvs.get(_unb64(c.get("key")).decode("utf-8", "surrogateescape"))
        target = c.get("target", "VERSION")
        result = c.get("result", "EQUAL")
        have: Any
        want: Any
        if target == "VALUE":
            if kv is None:
                return False
            have, want = kv.value, _unb64(c.get("value"))
        else:
            name = {"VERSION": "version", "CREATE": "create_revision",
                    "MOD": "mod_revision", "LEASE": "lease"}[target]
            have = 0 if kv is None else getattr(kv, name)
            want = int(c.get(name, 0))
        if result == "EQUAL":
            return bool(have == want)
        if result == "NOT_EQUAL":
            return bool(have != want)
        if result == "GREATER":
            return bool(have > want)
        return bool(have < want)

    def _check_leases(self, ops: Iterable[dict[str, Any]]) -> None:
        """etcd refuses a whole transaction whose put names a missing lease."""
        for op in ops:
            if "request_put" in op:
                lease = int(op["request_put"].get("lease", 0))
                if lease and lease not in self._leases:
                    raise LeaseNotFoundError("etcdserver: requested lease not found", 5)
            elif "request_txn" in op:
                body = op["request_txn"]
                self._check_leases(body.get("success", ()))
                self._check_leases(body.get("failure", ()))

    def _txn_locked(self, body: dict[str, Any], rev: int, events: list[Event]) -> TxnResult:
        ok = all(self._compare(c) for c in body.get("compare", ()))
        ops = body.get("success" if ok else "failure", ())
        responses: list[Any] = []
        for op in ops:
            if "request_range" in op:
                r = op["request_range"]
                end = _unb64(r["range_end"]) if "range_end" in r else None
                kvs = self._range(_unb64(r.get("key")), end)
                responses.append(RangeResult(kvs, len(kvs), rev))
            elif "request_put" in op:
                r = op["request_put"]
                self._put_key(_unb64(r.get("key")).decode("utf-8", "surrogateescape"),
                              _unb64(r.get("value")), int(r.get("lease", 0)), rev, events)
                responses.append(rev)
            elif "request_delete_range" in op:
                r = op["request_delete_range"]
                end = _unb64(r["range_end"]) if "range_end" in r else None
                gone = self._range(_unb64(r.get("key")), end)
                for kv in gone:
                    self._delete_key(kv.key, rev, events)
                responses.append(len(gone))
            elif "request_txn" in op:
                responses.append(self._txn_locked(op["request_txn"], rev, events))
            else:
                raise ValueError(f"unknown operation {op!r}")
        return TxnResult(ok, rev, responses)

    def _record(self, events: list[Event], rev: int) -> None:
        """Under the lock: the revision's events go to the file's writer, and wait for the
        file before the watches see them (`_publish`)."""
        if events:
            self._unwritten.append(events)
            self._pending.append((rev, events))

    def _write(self, body: dict[str, Any]) -> tuple[TxnResult, int | None]:
        """One write request (a transaction) under the lock: (result, revision to persist)."""
        with self._lock:
            expired: list[Event] = []
            self._expire_locked(expired)
            ok = all(self._compare(c) for c in body.get("compare", ()))
            self._check_leases(body.get("success" if ok else "failure", ()))
            rev = self._revision + 1
            events: list[Event] = []
            result = self._txn_locked(body, rev, events)
            if events:
                self._revision = rev
                self._record(events, rev)
                return result, rev
            # Nothing written: etcd answers at the current revision.
            result = TxnResult(result.succeeded, self._revision,
                               _at_revision(result.responses, self._revision))
            return result, (self._revision if expired else None)

    # ------------------------------------------------------------------ key-value

    async def range(self, key: str, *, prefix: bool = False, range_end: bytes | None = None,
                    revision: int = 0, limit: int = 0, keys_only: bool = False) -> RangeResult:
        if revision:
            raise ValueError("LocalKV serves ranges at the current revision only")
        if prefix:
            range_end = prefix_range_end(key)
        with self._lock:
            expired: list[Event] = []
            self._expire_locked(expired)
            kvs = self._range(_kb(key), range_end)
            count = len(kvs)
            more = bool(limit) and count > limit
            if limit:
                kvs = kvs[:limit]
            if keys_only:
                kvs = [KeyValue(kv.key, b"", kv.create_revision, kv.mod_revision, kv.version,
                                kv.lease) for kv in kvs]
            result = RangeResult(kvs, count, self._revision, more)
            snap = self._revision if expired else None
        await self._persist(snap)
        return result

    async def get(self, key: str) -> KeyValue | None:
        r = await self.range(key)
        return r.kvs[0] if r.kvs else None

    async def put(self, key: str, value: bytes | str, *, lease: int = 0) -> int:
        r = await self.txn([], [Op.put(key, value, lease=lease)])
        return r.revision

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        r = await self.txn([], [Op.delete(key, prefix=prefix)])
        return int(r.responses[0])

    async def txn(self, compares: Iterable[Compare], success: Iterable[Op] = (),
                  failure: Iterable[Op] = ()) -> TxnResult:
        body = {"compare": [c.to_json() for c in compares],
                "success": [o.to_json() for o in success],
                "failure": [o.to_json() for o in failure]}
        result, snap = self._write(body)
        await self._persist(snap)
        return result

    async def compact(self, revision: int) -> None:
        with self._lock:
            while self._history and self._history[0][0] <= revision:
                self._history.popleft()
            self._compact_revision = max(self._compact_revision, revision)

    # ------------------------------------------------------------------ leases

    async def lease_grant(self, ttl_s: int, lease_id: int = 0) -> tuple[int, int]:
        ttl = max(1, int(ttl_s))
        with self._lock:
            if lease_id and lease_id in self._leases:
                raise EtcdRequestError("etcdserver: lease already exists", 9)
            if not lease_id:
                self._next_lease += 1
                lease_id = (os.getpid() << 32) | self._next_lease
            self._leases[lease_id] = _Lease(ttl, self._clock() + ttl)
        return lease_id, ttl

    async def lease_keepalive(self, lease_id: int, timeout: float | None = None) -> int:
        with self._lock:
            expired: list[Event] = []
            self._expire_locked(expired)
            lease = self._leases.get(lease_id)
            if lease is not None:
                lease.deadline = self._clock() + lease.ttl
            snap = self._revision if expired else None
        self._persist_sync(snap)  # on the keeper's thread; it has nothing else to do
        return 0 if lease is None else lease.ttl

    async def lease_revoke(self, lease_id: int) -> None:
        with self._lock:
            events: list[Event] = []
            self._expire_locked(events)
            gone = self._revoke_locked(lease_id, events)
            snap = self._revision if (gone or events) else None
        await self._persist(snap)

    async def lease_ttl(self, lease_id: int) -> int:
        with self._lock:
            lease = self._leases.get(lease_id)
            if lease is None:
                return -1
            return max(0, math.ceil(lease.deadline - self._clock()))

    async def expire_leases(self) -> None:
        """Delete the keys of leases past their deadline (watches call this while idle)."""
        with self._lock:
            expired: list[Event] = []
            self._expire_locked(expired)
            snap = self._revision if expired else None
        await self._persist(snap)

    # ------------------------------------------------------------------ watch

    def watch(self, key: str, *, prefix: bool = False, start_revision: int = 0,
              idle_timeout: float = 0.0) -> LocalWatch:
        return LocalWatch(self, key, prefix=prefix, start_revision=start_revision)

    def _attach(self, w: LocalWatch) -> WatchResponse | None:
        """Register a watch; returns a snapshot when its start is no longer in the history,
        after queueing the events it missed otherwise."""
        with self._lock:
            self._watches.append(w)
            if not w.next_revision:
                w.next_revision = self._revision + 1
                return None
            if w.next_revision <= self._compact_revision:
                kvs = self._range(w._key, w._end)
                w.next_revision = self._revision + 1
                return WatchResponse(self._revision, [], kvs)
            for rev, events in self._history:
                if rev >= w.next_revision:
                    w._deliver(rev, events)
            return None

    def _detach(self, w: LocalWatch) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._watches.remove(w)


def _at_revision(responses: Sequence[Any], revision: int) -> list[Any]:
    out: list[Any] = []
    for r in responses:
        if isinstance(r, RangeResult):
            out.append(RangeResult(r.kvs, r.count, revision, r.more))
        elif isinstance(r, TxnResult):
            out.append(TxnResult(r.succeeded, revision, _at_revision(r.responses, revision)))
        else:
            out.append(r)
    return out


class LocalWatch:
    """A watch on a `LocalKV` range: `async for resp in watch`, `close()` ends it. The same
    shape as `yak.cluster.etcd.Watch`."""

    def __init__(self, kv: LocalKV, key: str, *, prefix: bool, start_revision: int) -> None:
        self._kv = kv
        self.key = key
        self.prefix = prefix
        self._key = _kb(key)
        self._end = prefix_range_end(key) if prefix else None
        self.next_revision = start_revision
        self.reconnects = 0
        self._closed = False
        self._queue: asyncio.Queue[WatchResponse | None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def close(self) -> None:
        self._closed = True
        if self._loop is not None and self._queue is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._queue.put_nowait, None)

    def _deliver(self, rev: int, events: list[Event]) -> None:
        """Under the store's lock, from any thread."""
        if rev < self.next_revision or self._queue is None or self._loop is None:
            return
        mine = [e for e in events if _in_range(_kb(e.kv.key), self._key, self._end)]
        if not mine:
            return
        self.next_revision = rev + 1
        with contextlib.suppress(RuntimeError):  # the watch's loop is closed
            self._loop.call_soon_threadsafe(self._queue.put_nowait,
                                            WatchResponse(rev, mine))

    def __aiter__(self) -> AsyncIterator[WatchResponse]:
        return self._run()

    async def _run(self) -> AsyncIterator[WatchResponse]:
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        snapshot = self._kv._attach(self)
        try:
            if snapshot is not None:
                yield snapshot
            while not self._closed:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancel that
                # comes in the loop iteration where the get completes, and the watch then
                # ran on while its consumer's stop() awaited it forever (a full-suite hang).
                try:
                    async with asyncio.timeout(EXPIRY_CHECK_S):
                        resp = await self._queue.get()
                except TimeoutError:
                    await self._kv.expire_leases()
                    continue
                if resp is None:
                    return
                yield resp
        finally:
            self._kv._detach(self)
