"""Requests one broker sends another besides replication: transaction markers and KIP-890
verification, for a transaction coordinator and a partition leader on different brokers.

`InterBrokerClient` keeps one `yak.wire.KafkaConnection` per broker (resolved to its
inter-broker endpoint from the metadata image, a new connection when the address
changes), requests pipelined on it, each bounded by a timeout; the connection closes
itself when a request fails, times out or is cancelled before its response was read (a
response left unread would otherwise be taken for the next request's, and every later
one would be off by one), and the next request opens it again.

`RemoteMarkerSender` is the transaction coordinator's seam (`yak.txn.markers`): markers for
partitions led elsewhere go to each leader as one WriteTxnMarkers request, and the per
partition error codes come back; a leader that cannot be reached answers
NOT_LEADER_OR_FOLLOWER for its partitions, which the coordinator retries (the leader may be
moving). `remote_verify` is Produce's KIP-890 check (AddPartitionsToTxn v4,
verify_only) against a coordinator on another broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from yak.errors import ErrorCode, KafkaError
from yak.partition import TxnMarker
from yak.partition.state import NO_LEADER
from yak.protocol import kio_compat
from yak.wire import PLAIN, BrokerConnectionError, Dialer, KafkaConnection

__all__ = ["InterBrokerClient", "InterBrokerError", "RemoteMarkerSender", "remote_verify"]

log = logging.getLogger(__name__)

Resolve = Callable[[int], "tuple[str, int] | None"]
REQUEST_TIMEOUT_S = 30.0

InterBrokerError = BrokerConnectionError
"""The broker could not be reached or answered nonsense (the connection's error)."""


class InterBrokerClient:
    def __init__(self, node_id: int, resolve: Resolve,
                 timeout_s: float = REQUEST_TIMEOUT_S,
                 dialer: Dialer | None = None) -> None:
        self.node_id = node_id
        self.resolve = resolve
        self.timeout_s = timeout_s
        # How to reach another broker's inter-broker listener: TLS and the SASL login are
        # the composition's to give (the security layer is above this one); plain TCP else.
        self.dialer = dialer or PLAIN
        self._conns: dict[int, KafkaConnection] = {}

    async def request(self, node: int, request: Any) -> Any:
        """Send `request` (a kio request object) to broker `node`; its response, or
        InterBrokerError."""
        addr = self.resolve(node)
        if addr is None:
            raise InterBrokerError(f"broker {node} is not registered")
        conn = self._conns.get(node)
        if conn is None or (conn.host, conn.port) != tuple(addr):
            if conn is not None:
                conn.close()
            conn = self._conns[node] = KafkaConnection(
                addr[0], addr[1], client_id=f"yak-broker-{self.node_id}",
                dialer=self.dialer, timeout_s=self.timeout_s)
        try:
            return await conn.request(request)
        except KafkaError as e:  # the connection's, or a refused login while opening it
            raise InterBrokerError(f"broker {node}: {e}") from e

    async def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


class RemoteMarkerSender:
    """`yak.txn.markers.RemoteMarkerSender`: WriteTxnMarkers to each partition's leader.

    `leader_of(topic, partition)` reads the leader from the metadata image."""

    def __init__(self, client: InterBrokerClient,
                 leader_of: Callable[[str, int], int]) -> None:
        self.client = client
        self.leader_of = leader_of

    async def __call__(self, markers: Sequence[TxnMarker]
                       ) -> Mapping[tuple[str, int], ErrorCode]:
        out: dict[tuple[str, int], ErrorCode] = {}
        by_leader: dict[int, list[TxnMarker]] = {}
        for m in markers:
            leader = self.leader_of(m.topic, m.partition)
            if leader == NO_LEADER or leader == self.client.node_id:
                # No leader right now, or the image says here but the caller found no
                # local leader: the leadership is moving; the coordinator retries.
                out[(m.topic, m.partition)] = ErrorCode.not_leader_or_follower
            else:
                by_leader.setdefault(leader, []).append(m)
        results = await asyncio.gather(*(self._send(leader, ms)
                                         for leader, ms in by_leader.items()))
        for r in results:
            out.update(r)
        return out

    async def _send(self, leader: int, markers: list[TxnMarker]
                    ) -> dict[tuple[str, int], ErrorCode]:
        mod = kio_compat.schema_module("write_txn_markers", 1, "request")
        groups: dict[tuple[int, int, bool, int], dict[str, list[int]]] = {}
        for m in markers:
            key = (m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch)
            groups.setdefault(key, {}).setdefault(m.topic, []).append(m.partition)
        req = kio_compat.build(mod.WriteTxnMarkersRequest, markers=tuple(
            kio_compat.build(
                mod.WritableTxnMarker, producer_id=pid, producer_epoch=epoch,
                transaction_result=commit, coordinator_epoch=cepoch,
                topics=tuple(kio_compat.build(mod.WritableTxnMarkerTopic, name=t,
                                              partition_indexes=tuple(ps))
                             for t, ps in topics.items()))
            for (pid, epoch, commit, cepoch), topics in groups.items()))
        try:
            resp = await self.client.request(leader, req)
        except InterBrokerError as e:
            log.info("markers to broker %d not sent (%s); the coordinator retries", leader, e)
            return {(m.topic, m.partition): ErrorCode.not_leader_or_follower for m in markers}
        out: dict[tuple[str, int], ErrorCode] = {}
        for marker in resp.markers:
            for t in marker.topics:
                for p in t.partitions:
                    out[(t.name, int(p.partition_index))] = ErrorCode(int(p.error_code))
        for m in markers:  # anything the leader left out: ask again
            out.setdefault((m.topic, m.partition), ErrorCode.not_leader_or_follower)
        return out


async def remote_verify(client: InterBrokerClient, coordinator: int, transactional_id: str,
                        producer_id: int, producer_epoch: int,
                        partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """KIP-890 part 1 against a coordinator on another broker: AddPartitionsToTxn v4 with
    verify_only, one request for all `partitions`. Each partition's error code (a
    transport failure is NOT_COORDINATOR for all: the producer retries and finds the
    coordinator again; a partition missing from the answer is UNKNOWN_SERVER_ERROR)."""
    mod = kio_compat.schema_module("add_partitions_to_txn", 4, "request")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    req = kio_compat.build(mod.AddPartitionsToTxnRequest, transactions=(kio_compat.build(
        mod.AddPartitionsToTxnTransaction, transactional_id=transactional_id,
        producer_id=producer_id, producer_epoch=producer_epoch, verify_only=True,
        topics=tuple(kio_compat.build(mod.AddPartitionsToTxnTopic, name=topic,
                                      partitions=tuple(ps))
                     for topic, ps in by_topic.items())),))
    try:
        resp = await client.request(coordinator, req)
    except InterBrokerError as e:
        log.info("KIP-890 verification with broker %d failed: %s", coordinator, e)
        return dict.fromkeys(partitions, ErrorCode.not_coordinator)
    if int(resp.error_code):
        return dict.fromkeys(partitions, ErrorCode(int(resp.error_code)))
    codes = dict.fromkeys(partitions, ErrorCode.unknown_server_error)
    for result in resp.results_by_transaction:
        for t in result.topic_results:
            for p in t.results_by_partition:
                key = (t.name, int(p.partition_index))
                if key in codes:
                    codes[key] = ErrorCode(int(p.partition_error_code))
    return codes
