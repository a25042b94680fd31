"""How a share-partition leader reaches the share coordinator (Kafka's Persister,
DefaultStatePersister): read a share partition's state on first use, write each change.

The key's coordinator is the leader of its `__share_group_state` partition. When that is
this broker, the `ShareCoordinator` is called in-process (the same write operation the
RPC handler runs); otherwise the state RPCs go to that broker over the inter-broker
client (ReadShareGroupState 84, WriteShareGroupState 85, as Kafka's leader sends them).
A write is answered only once the coordinator made it durable (acks=all); anything else
is an error code the caller turns into its own (a failed acknowledgement is reported, a
failed acquisition is handed back), never a silent loss.

Order: a share partition's writes are submitted in the order its changes were taken
(no await between taking the changes and submitting them): in-process the coordinator
runtime keeps submission order per shard; over the wire one pipelined connection
keeps request order and the RPC handler submits before its first await.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.delete_share_group_state.v0 import request as delete_req
from kio.schema.read_share_group_state.v0 import request as read_req
from kio.schema.write_share_group_state.v0 import request as write_req
from kio.static.primitive import i8, i16, i32, i64

from yak.errors import ErrorCode
from yak.share.coordinator import ShareCoordinator
from yak.share.records import ShareKey, StateBatch

__all__ = ["CoordinatorPersister", "ReadResult"]

log = logging.getLogger(__name__)

Send = Callable[[int, Any], Awaitable[Any]]


@dataclass
class ReadResult:
    error: ErrorCode = ErrorCode.none
    state_epoch: int = 0
    start_offset: int = -1  # -1: no state yet (initialize by share.auto.offset.reset)
    batches: list[StateBatch] = field(default_factory=list)


class CoordinatorPersister:
    def __init__(self, coordinator: ShareCoordinator,
                 coordinator_node: Callable[[int], int] | None = None,
                 send: Send | None = None, node_id: int = -1) -> None:
        self.coordinator = coordinator
        self._node_of = coordinator_node  # the leader of a __share_group_state partition
        self._send = send
        self._node_id = node_id

    def _remote(self, key: ShareKey) -> int | None:
        """The broker to send the RPC to, or None to serve it here."""
        if self._node_of is None or self._send is None or not self.coordinator.writer.exists() \
                or self.coordinator.coordinates(key):
            return None  # led here (the common case, asked first: the lookup is not free)
        node = self._node_of(self.coordinator.partition_for(key))
        return None if node < 0 or node == self._node_id else node

    async def read(self, key: ShareKey, leader_epoch: int) -> ReadResult:
        node = self._remote(key)
        if node is not None:
            return await self._read_remote(node, key, leader_epoch)
        err = await self.coordinator.ensure_ready(key)
        if err is not None:
            return ReadResult(err)
        code, st = await self.coordinator.read_state(key, leader_epoch)
        if code is not ErrorCode.none or st is None:
            return ReadResult(code)
        return ReadResult(ErrorCode.none, st.state_epoch, st.start_offset, list(st.batches))

    def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: Sequence[StateBatch]) -> Awaitable[ErrorCode]:
        """Submit now (the caller's order), await the durable answer."""
        node = self._remote(key)
        if node is not None:
            return self._write_remote(node, key, state_epoch, leader_epoch, start_offset,
                                      batches)
        return self.coordinator.write(key, state_epoch, leader_epoch, start_offset, batches)

    async def reset(self, key: ShareKey, start_offset: int) -> ErrorCode:
        """AlterShareGroupOffsets: a new state at `start_offset`, nothing in flight, at
        the next state epoch (a leader still holding the old state is fenced and reads
        it again)."""
        current = await self.read(key, -1)
        if current.error is not ErrorCode.none:
            return current.error
        return await self.write(key, current.state_epoch + 1, -1, start_offset, ())

    async def delete(self, key: ShareKey) -> ErrorCode:
        """DeleteShareGroupState: the key's state gone (tombstones, durable), here or by
        RPC 86 to its coordinator."""
        node = self._remote(key)
        if node is not None:
            assert self._send is not None
            req = delete_req.DeleteShareGroupStateRequest(group_id=key.group_id, topics=(
                delete_req.DeleteStateData(topic_id=key.topic_id, partitions=(
                    delete_req.PartitionData(partition=i32(key.partition)),)),))
            try:
                resp = await self._send(node, req)
            except Exception as e:
                log.info("DeleteShareGroupState to broker %d: %s", node, e)
                return ErrorCode.coordinator_not_available
            for t in resp.results:
                for p in t.partitions:
                    return ErrorCode(p.error_code)
            return ErrorCode.unknown_server_error
        err = await self.coordinator.ensure_ready(key)
        return err if err is not None else await self.coordinator.delete(key)

    # ------------------------------------------------------------------ the RPCs

    async def _read_remote(self, node: int, key: ShareKey, leader_epoch: int) -> ReadResult:
        assert self._send is not None
        req = read_req.ReadShareGroupStateRequest(group_id=key.group_id, topics=(
            read_req.ReadStateData(topic_id=key.topic_id, partitions=(
                read_req.PartitionData(partition=i32(key.partition),
                                       leader_epoch=i32(leader_epoch)),)),))
        try:
            resp = await self._send(node, req)
        except Exception as e:  # the connection's error: retriable
            log.info("ReadShareGroupState to broker %d: %s", node, e)
            return ReadResult(ErrorCode.coordinator_not_available)
        for t in resp.results:
            for p in t.partitions:
                code = ErrorCode(p.error_code)
                if code is not ErrorCode.none:
                    return ReadResult(code)
                return ReadResult(ErrorCode.none, p.state_epoch, p.start_offset,
                                  [(b.first_offset, b.last_offset, b.delivery_state,
                                    b.delivery_count) for b in p.state_batches])
        return ReadResult(ErrorCode.unknown_server_error)

    async def _write_remote(self, node: int, key: ShareKey, state_epoch: int,
                            leader_epoch: int, start_offset: int,
                            batches: Sequence[StateBatch]) -> ErrorCode:
        assert self._send is not None
        req = write_req.WriteShareGroupStateRequest(group_id=key.group_id, topics=(
            write_req.WriteStateData(topic_id=key.topic_id, partitions=(
                write_req.PartitionData(
                    partition=i32(key.partition), state_epoch=i32(state_epoch),
                    leader_epoch=i32(leader_epoch), start_offset=i64(start_offset),
                    state_batches=tuple(write_req.StateBatch(
                        first_offset=i64(a), last_offset=i64(b), delivery_state=i8(s),
                        delivery_count=i16(c)) for a, b, s, c in batches)),)),))
        try:
            resp = await self._send(node, req)
        except Exception as e:
            log.info("WriteShareGroupState to broker %d: %s", node, e)
            return ErrorCode.coordinator_not_available
        for t in resp.results:
            for p in t.partitions:
                return ErrorCode(p.error_code)
        return ErrorCode.unknown_server_error

