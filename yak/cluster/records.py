"""The values Yak stores in etcd, shaped like KRaft's metadata records.

Field names follow Kafka's JSON form of the records (`metadata/src/main/resources/common/
metadata/*.json`, camelCase as `kafka-metadata-shell` prints them), so a KRaft-style backend
could replay them and an operator reading etcd sees familiar names. Only the fields Yak uses
are kept; unknown fields are ignored on read so newer writers stay readable.

What is *not* stored, because etcd already says it: the broker epoch (the registration key's
create_revision), the controller epoch (the controller key's create_revision), and a
partition's last change (its key's mod_revision, used for compare-and-set).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

__all__ = [
    "BrokerEndpoint",
    "ConfigRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "TopicRecord",
    "decode",
    "encode",
]

NO_LEADER = -1
# LeaderRecoveryState (KIP-704): 0 RECOVERED, 1 RECOVERING (after an unclean election).
LEADER_RECOVERED = 0
LEADER_RECOVERING = 1


def encode(record: Any) -> bytes:
    """Compact JSON, keys sorted, so equal records are equal bytes (txn value compares)."""
    return json.dumps(record.to_json(), separators=(",", ":"), sort_keys=True).encode()


def decode(cls: type, data: bytes) -> Any:
    return cls.from_json(json.loads(data))


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(w[:1].upper() + w[1:] for w in rest)


class _Record:
    """JSON with Kafka's camelCase field names; tuples of ints or records as lists."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, tuple):
                v = [x.to_json() if isinstance(x, _Record) else x for x in v]
            elif isinstance(v, dict):
                v = dict(v)
            out[_camel(f.name)] = v
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Any:
        hints = get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            key = _camel(f.name)
            if key not in d:
                continue
            v = d[key]
            if isinstance(v, list):
                if hints[f.name] == tuple[BrokerEndpoint, ...]:
                    v = tuple(BrokerEndpoint.from_json(x) for x in v)
                elif hints[f.name] == tuple[str, ...]:
                    v = tuple(str(x) for x in v)
                else:
                    v = tuple(int(x) for x in v)
            kwargs[f.name] = v
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint(_Record):
    name: str  # listener name, e.g. "PLAINTEXT"
    host: str
    port: int
    security_protocol: int = 0  # Kafka's SecurityProtocol id: 0 PLAINTEXT


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord(_Record):
    """A live broker (`/yak/<cluster>/brokers/<broker_id>`, on the broker's session lease).

    `incarnation_id` is random per process start, so a second process claiming a node id that a
    live one holds is told apart from a restart of the same process."""

    broker_id: int
    incarnation_id: str
    end_points: tuple[BrokerEndpoint, ...] = ()
    rack: str | None = None
    fenced: bool = False
    in_controlled_shutdown: bool = False
    # The directory.id of the broker's data dir (meta.properties), KRaft's logDirs: a data
    # dir that was wiped comes back with a new id, so the controller never elects it.
    log_dirs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicRecord(_Record):
    """`/yak/<cluster>/topics/<name>`."""

    name: str
    topic_id: str  # UUID text


@dataclass(frozen=True, slots=True)
class PartitionRecord(_Record):
    """One partition's replica state (`/yak/<cluster>/partitions/<topic_id>/<partition_id>`).

    Every leader change bumps leader_epoch and partition_epoch; an ISR change bumps
    partition_epoch only. Writers compare the key's mod_revision (the AlterPartition
    partition-epoch check) so concurrent changes never overwrite each other."""

    topic_id: str
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: int = LEADER_RECOVERED
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    # KRaft's `directories`: for each replica (same order), the directory.id its data was
    # in when it was last known to hold the partition ("" = unknown).
    directories: tuple[str, ...] = ()

    def apply(self, change: PartitionChangeRecord) -> PartitionRecord:
        """The record after `change`, with the epochs bumped as KRaft's replay does."""
        leader = self.leader if change.leader is None else change.leader
        leader_changed = change.leader is not None and change.leader != self.leader
        return PartitionRecord(
            topic_id=self.topic_id,
            partition_id=self.partition_id,
            replicas=self.replicas if change.replicas is None else tuple(change.replicas),
            isr=self.isr if change.isr is None else tuple(change.isr),
            leader=leader,
            leader_epoch=self.leader_epoch + 1 if leader_changed else self.leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            leader_recovery_state=(self.leader_recovery_state
                                   if change.leader_recovery_state is None
                                   else change.leader_recovery_state),
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            directories=self.directories,
        )


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord(_Record):
    """A change to a PartitionRecord (None = unchanged). In etcd the partition key holds the
    result (PartitionRecord.apply); the change itself is what a writer computes."""

    topic_id: str
    partition_id: int
    leader: int | None = None
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    leader_recovery_state: int | None = None


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord(_Record):
    """`/yak/<cluster>/producer_ids`: the first producer id not yet handed out. A broker
    takes the block [nextProducerId, nextProducerId + size) with a compare on the key's
    mod_revision."""

    broker_id: int  # who took the last block
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class ConfigRecord(_Record):
    """Dynamic configs of one resource (`/yak/<cluster>/configs/<resource_type>/<name>`).
    KRaft has one ConfigRecord per key; Yak keeps one resource's configs in one value so an
    IncrementalAlterConfigs is one compare-and-set."""

    resource_type: int  # 2 TOPIC, 4 BROKER
    resource_name: str
    configs: dict[str, str] = field(default_factory=dict)


