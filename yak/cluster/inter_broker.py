"""Requests one broker sends another besides replication: transaction markers and KIP-890
verification, for a transaction coordinator and a partition leader on different brokers.

`InterBrokerClient` keeps one connection per broker (resolved to its inter-broker endpoint
from the metadata image), one request at a time on it, each bounded by a timeout; a
connection that fails, or whose request was cancelled or timed out before its response
was read, is dropped and opened again by the next request (a response left unread would
otherwise be taken for the next request's, and every later one would be off by one).

`RemoteMarkerSender` is the transaction coordinator's seam (`yak.txn.markers`): markers for
partitions led elsewhere go to each leader as one WriteTxnMarkers request, and the per
partition error codes come back; a leader that cannot be reached answers
NOT_LEADER_OR_FOLLOWER for its partitions, which the coordinator retries (the leader may be
moving). `remote_verify` is Produce's KIP-890 check (AddPartitionsToTxn v4,
verify_only) against a coordinator on another broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from yak.errors import ErrorCode
from yak.partition import TxnMarker
from yak.partition.state import NO_LEADER
from yak.protocol import kio_compat

__all__ = ["InterBrokerClient", "RemoteMarkerSender", "remote_verify"]

log = logging.getLogger(__name__)

Resolve = Callable[[int], "tuple[str, int] | None"]
# Opens a connection to (host, port) of another broker (the replica fetcher's type).
Connect = Callable[[str, int], Awaitable["tuple[asyncio.StreamReader, asyncio.StreamWriter]"]]
REQUEST_TIMEOUT_S = 30.0
_MAX_FRAME = 64 << 20


class InterBrokerError(Exception):
    """The broker could not be reached or answered nonsense."""


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 addr: tuple[str, int]) -> None:
        self.reader = reader
        self.writer = writer
        self.addr = addr
        self.lock = asyncio.Lock()
        self.correlation = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self.writer.close()


class InterBrokerClient:
    def __init__(self, node_id: int, resolve: Resolve,
                 timeout_s: float = REQUEST_TIMEOUT_S,
                 connect: Connect | None = None) -> None:
        self.node_id = node_id
        self.resolve = resolve
        self.timeout_s = timeout_s
        # How to reach another broker's inter-broker listener: TLS and the SASL login are
        # the composition's to give (the security layer is above this one); plain TCP else.
        self.connect = connect
        self._conns: dict[int, _Conn] = {}

    async def request(self, node: int, request: Any) -> Any:
        """Send `request` (a kio request object) to broker `node`; its response, or
        InterBrokerError."""
        addr = self.resolve(node)
        if addr is None:
            raise InterBrokerError(f"broker {node} is not registered")
        conn = self._conns.get(node)
        if conn is not None and conn.addr != addr:
            conn.close()
            conn = None
        try:
            if conn is None:
                opening = (self.connect(addr[0], addr[1]) if self.connect is not None
                           else asyncio.open_connection(addr[0], addr[1], limit=1 << 20))
                reader, writer = await asyncio.wait_for(opening, self.timeout_s)
                conn = self._conns[node] = _Conn(reader, writer, addr)
            async with conn.lock:
                if conn.closed:  # dropped while this request waited for its turn
                    raise ConnectionResetError("the connection was dropped")
                conn.correlation = (conn.correlation + 1) & 0x7FFFFFFF
                cid = conn.correlation
                done = False
                try:
                    conn.writer.write(kio_compat.encode_request(
                        request, cid, f"yak-broker-{self.node_id}"))
                    frame = await asyncio.wait_for(self._read_frame(conn), self.timeout_s)
                    done = True
                finally:
                    if not done:
                        # Failed, timed out or cancelled (a caller's task, e.g. a Produce
                        # whose client went away) with the response maybe still on its
                        # way: the next request on this connection would read it as its
                        # own. Only a fresh connection is in step again.
                        self._drop(node, conn)
            got, response = kio_compat.decode_response(
                int(request.__api_key__), int(request.__version__), frame)
            if got != cid:
                raise ValueError(f"correlation id {got}, expected {cid}")
            return response
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError,
                RuntimeError) as e:
            # (RuntimeError: uvloop's write on a transport closed under it)
            if conn is not None:
                self._drop(node, conn)
            raise InterBrokerError(f"broker {node} at {addr[0]}:{addr[1]}: {e!r}") from e

    def _drop(self, node: int, conn: _Conn) -> None:
        if self._conns.get(node) is conn:
            del self._conns[node]
        conn.close()

    @staticmethod
    async def _read_frame(conn: _Conn) -> bytes:
        (size,) = struct.unpack(">i", await conn.reader.readexactly(4))
        if not 0 < size <= _MAX_FRAME:
            raise ValueError(f"response frame of {size} bytes")
        return await conn.reader.readexactly(size)

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
