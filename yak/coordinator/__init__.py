"""The coordinator runtime (issue 22): one shard per internal-topic partition, hosting the
group and transaction coordinators' state machines (Kafka's `coordinator-common`).

Layer: above `partition/`, below `group/` and `txn/`; it imports only `partition/`,
`storage/`, `protocol/`, `clock`, `errors` and `settings`. See `runtime.py` for the
ordering invariant and `api.py` for the contracts.
"""

from yak.coordinator.api import (
    NO_PRODUCER,
    ChunkedCoordinatorLoader,
    CoordinatorLoader,
    CoordinatorResult,
    CoordinatorShard,
    PartitionWriter,
    Record,
)
from yak.coordinator.runtime import CoordinatorRuntime, ShardContext, ShardState
from yak.coordinator.timer import TimerQueue

__all__ = [
    "NO_PRODUCER",
    "ChunkedCoordinatorLoader",
    "CoordinatorLoader",
    "CoordinatorResult",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "PartitionWriter",
    "Record",
    "ShardContext",
    "ShardState",
    "TimerQueue",
]
