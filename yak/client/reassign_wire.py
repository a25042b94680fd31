"""AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders and Metadata for
`yak partitions`, `yak cluster decommission` and `yak cluster elect-leaders` (issue 23), over
`yak.client`'s blocking connection.

Why not confluent-kafka's AdminClient, as `yak topic` uses: librdkafka has no partition
reassignment API. The connection, TLS/SASL and version negotiation are `config_wire.py`'s
(`ConfigClient` with this module's API list); every request here may go to any broker, so
only the bootstrap connection is used.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from yak.client.config_wire import ConfigClient, ConfigWireError
from yak.protocol.kio_compat import build, schema_module
from yak.security.client import ClientSecurity

# Preferred versions, newest first (api key, versions).
_APIS = {"metadata": (3, (12, 9, 5, 1)), "alter_partition_reassignments": (45, (1, 0)),
         "list_partition_reassignments": (46, (0,)), "elect_leaders": (43, (2, 1, 0))}

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Ongoing:
    """One partition being moved, as ListPartitionReassignments tells it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]  # the whole set while moving: target plus removing
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)


@dataclass(frozen=True)
class PartitionState:
    """One partition as Metadata shows it (the whole replica set while it moves)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int


@dataclass(frozen=True)
class ClusterView:
    """Registered brokers (node id -> rack) and every partition's replicas."""

    brokers: dict[int, str | None]
    partitions: dict[TopicPartition, PartitionState]


class ReassignClient:
    """The four requests, each one exchange on the bootstrap connection."""

    def __init__(self, bootstrap: str, timeout_s: float,
                 security: ClientSecurity | None) -> None:
        self._client = ConfigClient(bootstrap, timeout_s, security, apis=_APIS)
        self._timeout = datetime.timedelta(seconds=timeout_s)

    def close(self) -> None:
        self._client.close()

    def alter(self, moves: Mapping[TopicPartition, Sequence[int] | None]
              ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Start, replace or (None) cancel moves: each partition's (error code, message).

        A top-level error (CLUSTER_AUTHORIZATION_FAILED) raises ConfigWireError."""
        link = self._client.bootstrap_link()
        m = schema_module("alter_partition_reassignments",
                          link.versions["alter_partition_reassignments"], "request")
        by_topic: dict[str, list[object]] = {}
        for (topic, p), replicas in moves.items():
            by_topic.setdefault(topic, []).append(build(
                m.ReassignablePartition, partition_index=p,
                replicas=None if replicas is None else tuple(replicas)))
        resp = link.send("alter_partition_reassignments", "AlterPartitionReassignments",
                         timeout=self._timeout, allow_replication_factor_change=True,
                         topics=tuple(build(m.ReassignableTopic, name=t, partitions=tuple(ps))
                                      for t, ps in by_topic.items()))
        if resp.error_code:
            raise ConfigWireError(int(resp.error_code), resp.error_message)
        return {(t.name, int(p.partition_index)): (int(p.error_code), p.error_message)
                for t in resp.responses for p in t.partitions}

    def ongoing(self) -> list[Ongoing]:
        """Every partition being moved, sorted by topic and partition."""
        link = self._client.bootstrap_link()
        resp = link.send("list_partition_reassignments", "ListPartitionReassignments",
                         timeout=self._timeout, topics=None)
        if resp.error_code:
            raise ConfigWireError(int(resp.error_code), resp.error_message)
        got = [Ongoing(t.name, int(p.partition_index), tuple(map(int, p.replicas)),
                       tuple(map(int, p.adding_replicas)), tuple(map(int, p.removing_replicas)))
               for t in resp.topics for p in t.partitions]
        return sorted(got, key=lambda o: (o.topic, o.partition))

    def elect(self, election_type: int, partitions: Sequence[TopicPartition] | None
              ) -> dict[TopicPartition, tuple[int, str | None]]:
        """ElectLeaders: each partition's (error code, message). None: every partition
        (the broker then answers only the elections that happened or failed). v0 knows
        only preferred elections; an unclean one to such a broker is a ValueError."""
        link = self._client.bootstrap_link()
        version = link.versions["elect_leaders"]
        if version == 0 and election_type != PREFERRED:
            raise ValueError("the broker supports only preferred leader elections"
                             " (ElectLeaders v0)")
        m = schema_module("elect_leaders", max(version, 0), "request")
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions or ():
            by_topic.setdefault(topic, []).append(p)
        wanted = None if partitions is None else tuple(
            build(m.TopicPartitions, topic=t, partitions=tuple(ps))
            for t, ps in by_topic.items())
        fields: dict[str, object] = {"topic_partitions": wanted, "timeout": self._timeout}
        if version >= 1:
            fields["election_type"] = election_type
        resp = link.send("elect_leaders", "ElectLeaders", **fields)
        if getattr(resp, "error_code", 0):
            raise ConfigWireError(int(resp.error_code), None)
        return {(r.topic, int(p.partition_id)): (int(p.error_code), p.error_message)
                for r in resp.replica_election_results for p in r.partition_result}

    def cluster(self) -> ClusterView:
        """Metadata for every topic: the registered brokers and each partition's replicas."""
        resp = self._client.bootstrap_link().send(
            "metadata", "Metadata", topics=None, allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        brokers = {int(b.node_id): getattr(b, "rack", None) for b in resp.brokers}
        parts = {(t.name, int(p.partition_index)): PartitionState(
                     tuple(map(int, p.replica_nodes)), tuple(map(int, p.isr_nodes)),
                     int(p.leader_id))
                 for t in resp.topics if not t.error_code for p in t.partitions}
        return ClusterView(brokers, parts)


@contextmanager
def reassign_client(bootstrap: str, timeout_s: float,
                    security: ClientSecurity | None) -> Iterator[ReassignClient]:
    client = ReassignClient(bootstrap, timeout_s, security)
    try:
        yield client
    finally:
        client.close()
