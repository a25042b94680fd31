"""The cluster's metadata in etcd: a live image read without I/O, and writes as transactions.

`EtcdMetadataStore` is the etcd backend of the metadata interface (`yak.cluster.metadata`).
It keeps one `PrefixView` over the whole cluster namespace (`/yak/<cluster>/`), so the image
it serves (topics, partition records, topic configs, registered brokers, the controller,
the next producer id) is always a state etcd had at one revision: a topic is never seen
without its partitions, nor a partition of a topic that is gone. Every broker holds the same
image, a few milliseconds apart; handlers read it synchronously, as they read the local
store on a single broker.

Every change is an etcd transaction guarded by compares on exactly the keys it changes
(a topic is created only if its key does not exist, a partition record is replaced only if
its mod_revision is the one the writer read, ...), so concurrent writers from any broker
never overwrite each other; etcd serializes them. After a write the store waits until its
own image has caught up with the write's revision, so a caller reads what it wrote.

Listeners (`add_listener`) get a `MetadataDelta` after each change of the image: the
controller (`quorum_controller.py`) and the broker's publisher (`node.py`) run from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from yak.cluster.etcd import Compare, EtcdUnavailable, KeyValue, Op
from yak.cluster.identity import check_data_dir, ensure_cluster_id, read_meta_properties
from yak.cluster.kv import KVClient
from yak.cluster.layout import ClusterKeys
from yak.cluster.metadata import (
    StalePartitionStateError,
    TopicInfo,
    validate_topic_name,
)
from yak.cluster.prefix_view import PrefixView
from yak.cluster.records import (
    ConfigRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    decode,
    encode,
)
from yak.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from yak.partition.state import NO_LEADER, PartitionState

__all__ = [
    "TOPIC_RESOURCE",
    "BrokerInfo",
    "ConcurrentChangeError",
    "EtcdMetadataStore",
    "MetadataDelta",
    "PartitionEntry",
    "record_to_state",
]

log = logging.getLogger(__name__)

TOPIC_RESOURCE = 2  # Kafka's ConfigResource.Type.TOPIC
# etcd refuses a transaction with more operations than --max-txn-ops (128 by default).
MAX_TXN_OPS = 100
CATCH_UP_TIMEOUT_S = 5.0


class ConcurrentChangeError(KafkaError):
    """Another writer changed the same metadata between our read and our write (etcd's
    compare failed): the caller's view was stale. INVALID_UPDATE_VERSION, as AlterPartition
    answers a stale partition epoch."""

    code = ErrorCode.invalid_update_version


def record_to_state(r: PartitionRecord) -> PartitionState:
    return PartitionState(replicas=r.replicas, isr=r.isr, leader=r.leader,
                          leader_epoch=r.leader_epoch, partition_epoch=r.partition_epoch,
                          leader_recovery_state=r.leader_recovery_state)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered broker as the image shows it; `epoch` is its registration's
    create_revision (the broker epoch)."""

    node_id: int
    epoch: int
    record: RegisterBrokerRecord

    @property
    def rack(self) -> str | None:
        return self.record.rack

    @property
    def fenced(self) -> bool:
        return self.record.fenced

    @property
    def in_controlled_shutdown(self) -> bool:
        return self.record.in_controlled_shutdown

    @property
    def directory(self) -> str:
        return self.record.log_dirs[0] if self.record.log_dirs else ""

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """(host, port) on `listener` (None: the first registered listener)."""
        for ep in self.record.end_points:
            if listener is None or ep.name == listener:
                return ep.host, ep.port
        return None


@dataclass(frozen=True, slots=True)
class PartitionEntry:
    """A partition record and its key's mod_revision (what a compare-and-set compares)."""

    record: PartitionRecord
    mod_revision: int

    @property
    def state(self) -> PartitionState:
        return record_to_state(self.record)


@dataclass
class MetadataDelta:
    """What one change of the image touched."""

    revision: int
    topics: set[str] = field(default_factory=set)  # created, deleted or re-configured
    deleted_topics: dict[str, str] = field(default_factory=dict)  # topic id -> name
    partitions: set[tuple[str, int]] = field(default_factory=set)  # (topic id, index)
    configs: set[str] = field(default_factory=set)  # topic names whose configs changed
    brokers: set[int] = field(default_factory=set)  # registered, re-registered, changed, gone
    controller: bool = False
    snapshot: bool = False  # the first image (or one rebuilt after a compaction)


Listener = Callable[[MetadataDelta], None]


class EtcdMetadataStore:
    """The metadata image of one cluster namespace, and its writes (see module docstring)."""

    def __init__(self, client: KVClient, keys: ClusterKeys, node_id: int,
                 data_dir: str | Path | None = None) -> None:
        self.client = client
        self.keys = keys
        self.node_id = node_id
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._cluster_id = ""
        self.directory_id = ""
        self._view = PrefixView(client, keys.root, on_change=self._changed)
        self._topics: dict[str, tuple[TopicRecord, KeyValue]] = {}
        self._names: dict[str, str] = {}  # topic id -> name
        self._parts: dict[str, dict[int, PartitionEntry]] = {}  # topic id -> index -> entry
        self._configs: dict[str, tuple[dict[str, str], int]] = {}  # name -> configs, mod rev
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller: tuple[int, int] | None = None
        self._producer_ids: tuple[ProducerIdsRecord, int] | None = None
        self._listeners: list[Listener] = []
        self._document_listeners: dict[str, list[Callable[[bytes | None], None]]] = {}
        self._started = False
        self._seen_first_image = False

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """The cluster id (created if this is the first broker), the data dir's
        meta.properties checked against it (DataDirMismatchError, one line), then the
        first image."""
        self._cluster_id = await ensure_cluster_id(self.client, self.keys)
        if self.data_dir is not None:
            await asyncio.to_thread(check_data_dir, self.data_dir, self._cluster_id,
                                    self.node_id)
            props = read_meta_properties(self.data_dir) or {}
            self.directory_id = props.get("directory.id", "")
        self._started = True
        await self._view.start()

    async def stop(self) -> None:
        await self._view.stop()

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    @property
    def revision(self) -> int:
        return self._view.revision

    async def wait_for_revision(self, revision: int,
                                timeout: float = CATCH_UP_TIMEOUT_S) -> None:
        """Until the image includes the write at `revision` (read-your-writes)."""
        if self._view.revision >= revision:
            return
        try:
            await self._view.wait_for(lambda v: v.revision >= revision, timeout)
        except TimeoutError:
            log.warning("metadata image still at revision %d, %.0f s after a write at %d",
                        self._view.revision, timeout, revision)

    async def wait_for(self, predicate: Callable[[EtcdMetadataStore], bool],
                       timeout: float) -> None:
        """Until `predicate(self)` holds after some change of the image; TimeoutError."""
        await self._view.wait_for(lambda _v: predicate(self), timeout)

    # ------------------------------------------------------------------ the image

    def _changed(self, view: PrefixView, keys: set[str]) -> None:
        delta = MetadataDelta(view.revision, snapshot=not self._seen_first_image)
        self._seen_first_image = True
        root = self.keys.root
        # Topics first: a partition's topic may arrive in the same batch.
        ordered = sorted(keys, key=lambda k: 0 if k.startswith(self.keys.topics) else 1)
        for key in ordered:
            kv = view.items.get(key)
            rel = key[len(root):]
            try:
                self._apply(rel, kv, delta)
            except (ValueError, TypeError, KeyError) as e:
                log.warning("ignoring unreadable metadata key %s: %s", key, e)
        for listener in list(self._listeners):
            try:
                listener(delta)
            except Exception:
                log.exception("metadata listener failed")

    def _apply(self, rel: str, kv: KeyValue | None, delta: MetadataDelta) -> None:
        kind, _, rest = rel.partition("/")
        if kind == "topics":
            name = rest
            old = self._topics.pop(name, None)
            if old is not None:
                self._names.pop(old[0].topic_id, None)
                if kv is None or decode(TopicRecord, kv.value).topic_id != old[0].topic_id:
                    delta.deleted_topics[old[0].topic_id] = name
            if kv is not None:
                rec = decode(TopicRecord, kv.value)
                self._topics[name] = (rec, kv)
                self._names[rec.topic_id] = name
                delta.deleted_topics.pop(rec.topic_id, None)
            delta.topics.add(name)
        elif kind == "partitions":
            topic_id, _, index = rest.partition("/")
            p = int(index)
            parts = self._parts.setdefault(topic_id, {})
            if kv is None:
                parts.pop(p, None)
                if not parts:
                    del self._parts[topic_id]
            else:
                parts[p] = PartitionEntry(decode(PartitionRecord, kv.value), kv.mod_revision)
            delta.partitions.add((topic_id, p))
        elif kind == "configs":
            rtype, _, name = rest.partition("/")
            if int(rtype) != TOPIC_RESOURCE:
                return
            if kv is None:
                self._configs.pop(name, None)
            else:
                rec = decode(ConfigRecord, kv.value)
                self._configs[name] = ({str(k): str(v) for k, v in rec.configs.items()},
                                       kv.mod_revision)
            delta.configs.add(name)
        elif kind == "brokers":
            node_id = int(rest)
            if kv is None:
                self._brokers.pop(node_id, None)
            else:
                self._brokers[node_id] = BrokerInfo(
                    node_id, kv.create_revision, decode(RegisterBrokerRecord, kv.value))
            delta.brokers.add(node_id)
        elif rel == "controller":
            self._controller = (None if kv is None
                                else (int(json.loads(kv.value)["brokerId"]), kv.create_revision))
            delta.controller = True
        elif rel == "producer_ids":
            self._producer_ids = (None if kv is None
                                  else (decode(ProducerIdsRecord, kv.value), kv.mod_revision))
        elif rel == "cluster_id" and kv is not None:
            self._cluster_id = kv.value.decode()
        elif kind == "documents":
            for callback in list(self._document_listeners.get(rest, ())):
                try:
                    callback(None if kv is None else kv.value)
                except Exception:
                    log.exception("listener of document %s failed", rest)

    # ------------------------------------------------------------------ documents

    def document(self, name: str) -> tuple[bytes | None, int]:
        """A cluster-wide document (`ClusterKeys.document`) from the image: (its value or
        None, its mod_revision or 0). No I/O."""
        kv = self._view.items.get(self.keys.document(name))
        return (None, 0) if kv is None else (kv.value, kv.mod_revision)

    def watch_document(self, name: str, callback: Callable[[bytes | None], None]) -> None:
        """Call `callback(value or None)` on the loop whenever the document changes in the
        image (a write from any broker, this one's included)."""
        self._document_listeners.setdefault(name, []).append(callback)

    async def put_document(self, name: str, value: bytes, mod_revision: int) -> bool:
        """Replace the document if it is still at `mod_revision` (0: absent); False if
        another writer changed it first (re-read and try again). Returns once the image
        has the write."""
        key = self.keys.document(name)
        cmp = (Compare.mod_revision(key, "==", mod_revision) if mod_revision
               else Compare.create_revision(key, "==", 0))
        r = await self.client.txn([cmp], [Op.put(key, value)])
        if r.succeeded:
            await self.wait_for_revision(r.revision)
        return r.succeeded

    def under(self, prefix: str) -> list[KeyValue]:
        """The image's keys under `prefix` (a `ClusterKeys` prefix, e.g. the brokers' load
        reports, which nothing else in the image interprets). No I/O."""
        return [kv for k, kv in self._view.items.items() if k.startswith(prefix)]

    # ------------------------------------------------------------------ reads (no I/O)

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def topics(self) -> list[TopicInfo]:
        return [info for name in list(self._topics) if (info := self.get(name)) is not None]

    def get(self, name: str) -> TopicInfo | None:
        entry = self._topics.get(name)
        if entry is None:
            return None
        rec = entry[0]
        parts = self._parts.get(rec.topic_id, {})
        count = 0
        while count in parts:
            count += 1
        configs = self._configs.get(name)
        return TopicInfo(name, uuid.UUID(rec.topic_id), count,
                         dict(configs[0]) if configs else {})

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        name = self._names.get(str(topic_id))
        return None if name is None else self.get(name)

    def topic_name(self, topic_id: str) -> str | None:
        return self._names.get(topic_id)

    def check_new_topic(self, name: str) -> None:
        validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        key = name.replace(".", "_")
        for other in self._topics:
            if other.replace(".", "_") == key:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")

    def partition_states(self, name: str) -> list[PartitionState]:
        return [e.state for e in self.partition_entries(name)]

    def partition_entries(self, name: str) -> list[PartitionEntry]:
        entry = self._topics.get(name)
        if entry is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        parts = self._parts.get(entry[0].topic_id, {})
        out = []
        while len(out) in parts:
            out.append(parts[len(out)])
        return out

    def partition_entry(self, topic_id: str, partition: int) -> PartitionEntry | None:
        return self._parts.get(topic_id, {}).get(partition)

    def all_partitions(self) -> Iterable[tuple[str, int, PartitionEntry]]:
        """(topic id, index, entry) of every partition of every existing topic."""
        for topic_id, parts in list(self._parts.items()):
            if topic_id in self._names:
                for p, e in list(parts.items()):
                    yield topic_id, p, e

    def brokers(self) -> dict[int, BrokerInfo]:
        """Registered brokers by node id (a snapshot)."""
        return dict(self._brokers)

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self._brokers.get(node_id)

    @property
    def controller(self) -> tuple[int, int] | None:
        """(node id, controller epoch) of the controller, or None while there is none."""
        return self._controller

    def next_producer_id(self) -> int:
        return self._producer_ids[0].next_producer_id if self._producer_ids else 0

    # ------------------------------------------------------------------ writes

    def _initial_record(self, topic_id: str, p: int, replicas: Sequence[int]
                        ) -> PartitionRecord:
        r = tuple(int(b) for b in replicas)
        dirs = tuple((b.directory if (b := self._brokers.get(n)) is not None else "")
                     for n in r)
        return PartitionRecord(topic_id=topic_id, partition_id=p, replicas=r, isr=r,
                               leader=r[0] if r else NO_LEADER, directories=dirs)

    async def create_topic(self, name: str, configs: Mapping[str, str] | None,
                           assignment: Sequence[Sequence[int]]) -> TopicInfo:
        """Create the topic with one partition per replica list of `assignment` (the first
        replica leads, every replica in sync). TopicAlreadyExistsError if it exists."""
        self.check_new_topic(name)
        if not assignment:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        topic_id = str(uuid.uuid4())
        topic_key = self.keys.topic(name)
        ops = [Op.put(self.keys.partition(topic_id, p), encode(self._initial_record(
            topic_id, p, replicas))) for p, replicas in enumerate(assignment)]
        final = [Op.put(topic_key, encode(TopicRecord(name, topic_id)))]
        if configs:
            final.append(Op.put(self.keys.config(TOPIC_RESOURCE, name), encode(
                ConfigRecord(TOPIC_RESOURCE, name, {k: str(v) for k, v in configs.items()}))))
        # Partitions of an unknown topic id are invisible, so large topics are written in
        # chunks and the topic key, written last, makes the whole topic appear at once.
        try:
            while len(ops) + len(final) > MAX_TXN_OPS:
                chunk, ops = ops[:MAX_TXN_OPS], ops[MAX_TXN_OPS:]
                await self.client.txn([], chunk)
            r = await self.client.txn([Compare.create_revision(topic_key, "==", 0)],
                                      ops + final)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.client.delete(self.keys.partitions + topic_id + "/", prefix=True)
            raise
        if not r.succeeded:
            await self.client.delete(self.keys.partitions + topic_id + "/", prefix=True)
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        await self.wait_for_revision(r.revision)
        info = self.get(name)
        if info is None or str(info.topic_id) != topic_id:  # deleted at once by someone
            raise UnknownTopicOrPartitionError(f"Topic '{name}' was deleted meanwhile.")
        return info

    async def delete_topic(self, name: str) -> TopicInfo:
        """Delete the topic, its partition records, configs and remote log metadata in one
        transaction."""
        for _ in range(3):
            entry = self._topics.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
            info = self.get(name)
            assert info is not None
            rec, kv = entry
            r = await self.client.txn(
                [Compare.mod_revision(kv.key, "==", kv.mod_revision)],
                [Op.delete(kv.key), Op.delete(self.keys.partitions + rec.topic_id + "/",
                                              prefix=True),
                 Op.delete(self.keys.config(TOPIC_RESOURCE, name)),
                 Op.delete(self.keys.remote_log_topic(rec.topic_id), prefix=True)],
                [Op.get(kv.key)])
            if r.succeeded:
                await self.wait_for_revision(r.revision)
                return info
            await self.wait_for_revision(r.revision)
        raise ConcurrentChangeError(f"Topic '{name}' kept changing while being deleted.")

    async def add_partitions(self, name: str, assignment: Sequence[Sequence[int]]
                             ) -> TopicInfo:
        """Append partitions (one per replica list) after the existing ones."""
        info = self.get(name)
        entry = self._topics.get(name)
        if info is None or entry is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        rec, kv = entry
        compares = [Compare.mod_revision(kv.key, "==", kv.mod_revision)]
        ops = []
        for i, replicas in enumerate(assignment):
            p = info.partitions + i
            key = self.keys.partition(rec.topic_id, p)
            compares.append(Compare.create_revision(key, "==", 0))
            ops.append(Op.put(key, encode(self._initial_record(rec.topic_id, p, replicas))))
        if len(ops) + len(compares) > MAX_TXN_OPS * 2:
            raise InvalidPartitionsError(
                f"at most {MAX_TXN_OPS - 1} partitions can be added at once")
        r = await self.client.txn(compares, ops)
        if not r.succeeded:
            raise ConcurrentChangeError(
                f"Topic '{name}' changed while partitions were being added: try again.")
        await self.wait_for_revision(r.revision)
        out = self.get(name)
        if out is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' was deleted meanwhile.")
        return out

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        """Replace the topic's config overrides, if nobody changed them since this image
        (ConcurrentChangeError otherwise: the caller computed from a stale value)."""
        entry = self._topics.get(name)
        if entry is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        key = self.keys.config(TOPIC_RESOURCE, name)
        seen = self._configs.get(name)
        cmp = (Compare.mod_revision(key, "==", seen[1]) if seen is not None
               else Compare.create_revision(key, "==", 0))
        value = encode(ConfigRecord(TOPIC_RESOURCE, name, {k: str(v) for k, v in
                                                           configs.items()}))
        r = await self.client.txn(
            [Compare.mod_revision(entry[1].key, "==", entry[1].mod_revision), cmp],
            [Op.put(key, value) if configs else Op.delete(key)])
        if not r.succeeded:
            raise ConcurrentChangeError(
                f"The configs of topic '{name}' changed meanwhile: try again.")
        await self.wait_for_revision(r.revision)
        out = self.get(name)
        if out is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' was deleted meanwhile.")
        return out

    async def compare_and_set_partition(
        self, topic_id: str, record: PartitionRecord, expected_mod_revision: int,
        extra: Sequence[Compare] = (), wait: bool = True,
    ) -> int:
        """Replace one partition record if its key is still at `expected_mod_revision`
        (and `extra` compares hold): AlterPartition's partition-epoch check, done by etcd.
        Returns the write's revision; StalePartitionStateError if someone changed it first."""
        key = self.keys.partition(topic_id, record.partition_id)
        r = await self.client.txn(
            [Compare.mod_revision(key, "==", expected_mod_revision), *extra],
            [Op.put(key, encode(record))])
        if not r.succeeded:
            raise StalePartitionStateError(
                f"partition {topic_id}/{record.partition_id} changed since revision"
                f" {expected_mod_revision}")
        if wait:
            await self.wait_for_revision(r.revision)
        return r.revision

    async def allocate_producer_ids(self, block_size: int, broker_epoch: int = -1) -> int:
        """Reserve [first, first + block_size) for this broker; returns `first`. A compare on
        the key's mod_revision makes every block go to one broker only; an attempt whose
        outcome is unknown is never used (the block it may have taken is skipped)."""
        key = self.keys.producer_ids
        for _ in range(20):
            kv = await self.client.get(key)
            current = decode(ProducerIdsRecord, kv.value).next_producer_id if kv else 0
            cmp = (Compare.mod_revision(key, "==", kv.mod_revision) if kv
                   else Compare.create_revision(key, "==", 0))
            record = ProducerIdsRecord(self.node_id, broker_epoch, current + block_size)
            try:
                r = await self.client.txn([cmp], [Op.put(key, encode(record))])
            except EtcdUnavailable:
                await asyncio.sleep(0.1)
                continue
            if r.succeeded:
                return current
        raise KafkaError("could not reserve a block of producer ids in etcd")
