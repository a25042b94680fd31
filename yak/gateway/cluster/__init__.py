"""The gateway's view of a Kafka cluster, reached only over the Kafka protocol.

Admin and produce go through confluent-kafka (librdkafka): its AdminClient covers
metadata, ListOffsets, configs, topics and groups, and its producer batches and retries
for us. Those calls block or complete on librdkafka's threads, so each is bridged onto
the event loop (`run_in_executor` / `asyncio.wrap_future`) and never blocks it.
Consumers are aiokafka, which is asyncio-native: a long poll is a coroutine waiting in
`getmany(timeout_ms=...)`, not a thread blocked in librdkafka's `poll()`.

This package is the only place the gateway builds Kafka clients (admin, producer,
consumers), so connection settings (and, with security, credentials) are set once for
all of them (`base.py`).

Every call has a bounded timeout: a dead broker must turn into an error the REST API
and the console can show, never a hung request.

`ClusterClient` is one object to its users (the core, the REST and console routes, the
metrics): one set of clients per caller. Its calls are written by responsibility, one
module each, over the shared `ClientBase`: `metadata.py` (metadata, offsets, log dirs),
`topics.py` (topics and configs), `groups.py` (groups, offsets, lag, transactions),
`security.py` (authorized operations, ACLs, SCRAM users) and `produce.py` (the producer
and its delivery reports); `model.py` holds `ClusterError` and the records they answer.
"""

from __future__ import annotations

from yak.gateway.cluster.groups import OPEN_TXN_STATES, GroupCalls
from yak.gateway.cluster.metadata import TOPIC_CACHE_S
from yak.gateway.cluster.model import (
    DEFAULT_TIMEOUT_S,
    ClusterError,
    ClusterMeta,
    PartitionMeta,
    Produced,
    TopicMeta,
    Watermarks,
)
from yak.gateway.cluster.produce import Delivery, ProduceCalls
from yak.gateway.cluster.security import SecurityCalls
from yak.gateway.cluster.topics import TopicCalls

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "OPEN_TXN_STATES",
    "TOPIC_CACHE_S",
    "ClusterClient",
    "ClusterError",
    "ClusterMeta",
    "Delivery",
    "PartitionMeta",
    "Produced",
    "TopicMeta",
    "Watermarks",
]


class ClusterClient(TopicCalls, GroupCalls, SecurityCalls, ProduceCalls):
    """Admin and producer access to one cluster; clients are created on first use."""
