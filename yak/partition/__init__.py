"""yak.partition: the partitions hosted on this broker (Kafka's Partition and ReplicaManager).

The layer between storage and everything that serves requests: handlers and coordinators
append, read, list offsets and delete records through `ReplicaManager`, never through a
`PartitionLog`. Each `Partition` owns its log and replica state (leader, epochs, ISR, high
watermark); see `docs/architecture.md`.
"""

from yak.partition.fetch import FetchParams, FetchPartition, PartitionReadResult
from yak.partition.partition import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchIsolation,
    LogAppendInfo,
    LogReadInfo,
    Partition,
)
from yak.partition.produce import AppendOrigin, PartitionAppendResult, TxnMarker
from yak.partition.purgatory import FetchPurgatory, ProducePurgatory
from yak.partition.replica_manager import LogDirDescription, ReplicaManager
from yak.partition.state import INTERNAL_TOPICS, NO_LEADER, PartitionState

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "INTERNAL_TOPICS",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "NO_LEADER",
    "AppendOrigin",
    "FetchIsolation",
    "FetchParams",
    "FetchPartition",
    "FetchPurgatory",
    "LogAppendInfo",
    "LogDirDescription",
    "LogReadInfo",
    "Partition",
    "PartitionAppendResult",
    "PartitionReadResult",
    "PartitionState",
    "ProducePurgatory",
    "ReplicaManager",
    "TxnMarker",
]
