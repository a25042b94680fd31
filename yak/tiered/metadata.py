"""The remote log's metadata (KIP-405's RemoteLogSegmentMetadata), kept as one manifest per
partition in the bucket itself, so a fresh cluster, a new leader or a reader without a
broker (Spark, tools) finds the remote log with the bucket alone.

Layout under the store's prefix (docs/tiered.md):

    <topic>-<topic id>/<partition>/manifest/<version, 20 digits>.json
    <topic>-<topic id>/<partition>/<base offset, 20 digits>-<segment id>.log (.index, ...)

A manifest version is never rewritten: version N+1 is created with a conditional write
(`If-None-Match: *`), so of two brokers that both believe they lead, exactly one commits
N+1; the other re-reads, sees the winner's leader epoch and stops. Readers take the highest
version. Old versions are deleted a few versions later (readers that listed them may
still be reading them).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property

from yak.tiered.store import RemoteStore

__all__ = ["FILE_KINDS", "Manifest", "ManifestStore", "RemoteLogSegmentMetadata",
           "SegmentState", "partition_dir", "topic_prefix"]

MANIFEST_FORMAT = 1
KEEP_VERSIONS = 4  # manifest versions kept behind the newest


class SegmentState(StrEnum):
    """Kafka's RemoteLogSegmentState."""

    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"  # removed from the manifest


# The files uploaded per segment (Kafka's LogSegmentData), by suffix. `.txnindex` and the
# producer snapshot are uploaded only when the segment has them.
FILE_KINDS = ("log", "index", "timeindex", "txnindex", "snapshot", "leader-epoch-checkpoint")


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    """One remote segment: [base_offset, end_offset] (both inclusive, Kafka's), its max
    timestamp, the leader epochs in it (epoch -> first offset), its `.log` size, state,
    and per uploaded file its size and CRC32C (indexes are checked with it when read;
    `.log` batches carry their own CRCs)."""

    segment_id: str
    base_offset: int
    end_offset: int
    max_timestamp: int
    size: int
    leader_epochs: list[tuple[int, int]]
    state: SegmentState
    files: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (size, crc)
    broker_id: int = -1
    event_ms: int = 0

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    def object_key(self, part_dir: str, kind: str) -> str:
        return f"{part_dir}/{self.base_offset:020d}-{self.segment_id}.{kind}"

    def with_state(self, state: SegmentState, now_ms: int) -> RemoteLogSegmentMetadata:
        return replace(self, state=state, event_ms=now_ms)

    def to_json(self) -> dict[str, object]:
        # By hand, in the fields' order (what `asdict` gave): `asdict` deep-copies every
        # value and cost ~47 us a segment, 47 ms for a manifest of 1,000 segments.
        return {"segment_id": self.segment_id, "base_offset": self.base_offset,
                "end_offset": self.end_offset, "max_timestamp": self.max_timestamp,
                "size": self.size, "leader_epochs": [list(e) for e in self.leader_epochs],
                "state": self.state.value,
                "files": {k: list(v) for k, v in self.files.items()},
                "broker_id": self.broker_id, "event_ms": self.event_ms}

    @cached_property
    def encoded(self) -> bytes:
        """This entry's compact JSON, encoded once per entry. An entry never changes (a
        new state is a new entry, `with_state`), so a manifest's bytes are the entries'
        cached bytes joined: a version encodes only the entries it adds or changes. Why:
        `json.dumps` of a whole 1,000-segment manifest held the GIL ~30 ms at a time in
        the thread that encoded it, twice per copy round, and the event loop waited for
        the GIL that long (benchmarks/tiered_loop_ab.py)."""
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, d: dict) -> RemoteLogSegmentMetadata:  # type: ignore[type-arg]
        return cls(
            segment_id=str(d["segment_id"]), base_offset=int(d["base_offset"]),
            end_offset=int(d["end_offset"]), max_timestamp=int(d["max_timestamp"]),
            size=int(d["size"]),
            leader_epochs=[(int(e), int(o)) for e, o in d["leader_epochs"]],
            state=SegmentState(d["state"]),
            files={k: (int(v[0]), int(v[1])) for k, v in d.get("files", {}).items()},
            broker_id=int(d.get("broker_id", -1)), event_ms=int(d.get("event_ms", 0)))


@dataclass(frozen=True)
class Manifest:
    """One committed version of a partition's remote log. `log_start_offset`: the remote
    log's start (advanced by remote retention); `leader_epoch`: the epoch of the leader
    that wrote this version (a writer with an older epoch is fenced)."""

    topic: str
    partition: int
    topic_id: str
    version: int = 0
    leader_epoch: int = -1
    broker_id: int = -1
    log_start_offset: int = 0
    segments: tuple[RemoteLogSegmentMetadata, ...] = ()

    @property
    def copied(self) -> list[RemoteLogSegmentMetadata]:
        """The readable segments, by base offset."""
        return [s for s in self.segments if s.state is SegmentState.COPY_SEGMENT_FINISHED]

    @property
    def copied_upto(self) -> int:
        """The offset below which the remote log holds every record (from its start)."""
        done = self.copied
        return max(s.end_offset for s in done) + 1 if done else self.log_start_offset

    @property
    def start_offset(self) -> int | None:
        """The remote log's first offset, None while it holds nothing readable."""
        done = self.copied
        if not done:
            return None
        return max(self.log_start_offset, min(s.base_offset for s in done))

    def find(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """The readable segment holding `offset` (the latest upload if two overlap)."""
        best = None
        for s in self.copied:
            if s.base_offset <= offset <= s.end_offset and (
                    best is None or s.base_offset > best.base_offset):
                best = s
        return best

    def to_bytes(self) -> bytes:
        """The same JSON as one `json.dumps` of the whole manifest would give, built from
        the entries' cached bytes (`RemoteLogSegmentMetadata.encoded`): the cost of a new
        version is its new entries plus one join, not the whole remote log."""
        head = json.dumps({
            "format": MANIFEST_FORMAT, "topic": self.topic, "partition": self.partition,
            "topic_id": self.topic_id, "version": self.version,
            "leader_epoch": self.leader_epoch, "broker_id": self.broker_id,
            "log_start_offset": self.log_start_offset,
        }, separators=(",", ":")).encode()
        return b"".join((head[:-1], b',"segments":[',
                         b",".join(s.encoded for s in self.segments), b"]}"))

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        d = json.loads(data)
        if d.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unknown manifest format {d.get('format')!r}")
        return cls(topic=d["topic"], partition=int(d["partition"]), topic_id=d["topic_id"],
                   version=int(d["version"]), leader_epoch=int(d["leader_epoch"]),
                   broker_id=int(d["broker_id"]), log_start_offset=int(d["log_start_offset"]),
                   segments=tuple(RemoteLogSegmentMetadata.from_json(s)
                                  for s in d["segments"]))


def topic_prefix(topic: str, topic_id: str) -> str:
    """The topic's key prefix (with its slash): the topic id keeps a re-created topic of the
    same name apart from the old one's objects."""
    return f"{topic}-{topic_id}/"


def partition_dir(topic: str, topic_id: str, partition: int) -> str:
    """The partition's key prefix (`topic_prefix` + partition)."""
    return f"{topic_prefix(topic, topic_id)}{partition}"


class ManifestStore:
    """Reads the newest manifest of a partition and commits the next one."""

    def __init__(self, store: RemoteStore) -> None:
        self.store = store

    async def load(self, topic: str, topic_id: str, partition: int) -> Manifest:
        """The newest committed version (an empty version 0 if none)."""
        d = partition_dir(topic, topic_id, partition)
        versions = await self._versions(d)
        for v in reversed(versions):
            try:
                data = await self.store.get(_manifest_key(d, v))
                # JSON off the event loop: a manifest grows with the remote log.
                return await asyncio.to_thread(Manifest.from_bytes, data)
            except ValueError:
                continue  # a torn or foreign object: the previous version stands
        return Manifest(topic, partition, topic_id)

    async def commit(self, new: Manifest) -> bool:
        """Create version `new.version`; False if that version exists already (another
        writer won). Prunes versions older than KEEP_VERSIONS behind it."""
        d = partition_dir(new.topic, new.topic_id, new.partition)
        data = await asyncio.to_thread(new.to_bytes)
        if not await self.store.create_only(_manifest_key(d, new.version), data):
            return False
        old = new.version - KEEP_VERSIONS
        if old > 0 and old % KEEP_VERSIONS == 0:
            stale = [v for v in await self._versions(d) if v <= old]
            await self.store.delete([_manifest_key(d, v) for v in stale])
        return True

    async def _versions(self, part_dir: str) -> list[int]:
        out = []
        for rel, _size in await self.store.list(f"{part_dir}/manifest/"):
            name = rel.rsplit("/", 1)[-1]
            if name.endswith(".json") and name[:-5].isdigit():
                out.append(int(name[:-5]))
        return sorted(out)


def _manifest_key(part_dir: str, version: int) -> str:
    return f"{part_dir}/manifest/{version:020d}.json"
