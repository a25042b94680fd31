"""How a share-partition leader reaches the share coordinator (Kafka's Persister,
DefaultStatePersister): read a share partition's state on first use, write each change.

The key's coordinator is the leader of its `__share_group_state` partition. When that is
this broker, the `ShareCoordinator` is called in-process (the same write operation the
RPC handler runs); otherwise the state RPCs go to that broker over the inter-broker
client (ReadShareGroupState 84, WriteShareGroupState 85, as Kafka's leader sends them;
InitializeShareGroupState 83 for the group coordinator, DeleteShareGroupState 86 for a
group delete). A read of a key with no state is `exists=False` (Kafka answers it
INVALID_REQUEST on the wire); the leader then initializes the key itself with its first
write, which only happens when the group coordinator's initialization has not landed.
A write is answered only once the coordinator made it durable (acks=all); anything else
is an error code the caller turns into its own (a failed acknowledgement is reported, a
failed acquisition is handed back), never a silent loss.

Order: a share partition's writes are submitted in the order its changes were taken
(no await between taking the changes and submitting them): in-process the coordinator
runtime keeps submission order per shard; over the wire one pipelined connection
keeps request order and the RPC handler submits before its first await.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.delete_share_group_state.v0 import request as delete_req
from kio.schema.initialize_share_group_state.v0 import request as init_req
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
    start_offset: int = -1  # -1: no start yet (initialize by share.auto.offset.reset)
    batches: list[StateBatch] = field(default_factory=list)
    # False: the key has no state at all (never initialized, or deleted; on the wire
    # Kafka's INVALID_REQUEST), as opposed to one initialized with start -1
    exists: bool = True


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
        if code is not ErrorCode.none:
            return ReadResult(code)
        if st is None:
            return ReadResult(exists=False)
        return ReadResult(ErrorCode.none, st.state_epoch, st.start_offset, list(st.batches))

    def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: Sequence[StateBatch]) -> Awaitable[ErrorCode]:
        """Submit now (the caller's order), await the durable answer. A write the
        coordinator refuses because the key has no state (INVALID_REQUEST, Kafka's
        "Write operation on uninitialized share partition": the group was deleted since
        this leader read it) is FENCED_STATE_EPOCH to the leader, as a reset is: its
        window is not the state any more, it drops it and reads the key again."""
        node = self._remote(key)
        if node is not None:
            return _as_fenced(self._write_remote(node, key, state_epoch, leader_epoch,
                                                 start_offset, batches))
        return _as_fenced(self.coordinator.write(key, state_epoch, leader_epoch,
                                                 start_offset, batches))

    async def reset(self, key: ShareKey, start_offset: int) -> ErrorCode:
        """AlterShareGroupOffsets: a new state at `start_offset`, nothing in flight, at
        the next state epoch (a leader still holding the old state is fenced and reads
        it again): InitializeShareGroupState with that start, as Kafka's group
        coordinator sends it."""
        current = await self.read(key, -1)
        if current.error is not ErrorCode.none:
            return current.error
        (code,) = await self.initialize([key], current.state_epoch + 1, start_offset)
        return code

    async def initialize(self, keys: Sequence[ShareKey], state_epoch: int = 0,
                         start_offset: int = -1) -> list[ErrorCode]:
        """InitializeShareGroupState for `keys` (one group's): in-process for the keys
        led here, else one RPC 83 per coordinator broker with all of its keys; one code
        per key, in order. The defaults are the group coordinator's first assignment:
        state epoch 0 and Kafka's uninitialized start (-1), which leaves an existing
        state as it is (`ShareCoordinator.initialize`)."""
        codes: list[ErrorCode] = [ErrorCode.none] * len(keys)
        remote: dict[int, list[int]] = {}
        local: list[int] = []
        for i, key in enumerate(keys):
            node = self._remote(key)
            if node is None:
                local.append(i)
            else:
                remote.setdefault(node, []).append(i)

        async def here(i: int) -> None:
            err = await self.coordinator.ensure_ready(keys[i])
            codes[i] = err if err is not None else await self.coordinator.initialize(
                keys[i], state_epoch, start_offset)

        async def there(node: int, idx: list[int]) -> None:
            assert self._send is not None
            by_topic: dict[Any, list[int]] = {}
            for i in idx:
                by_topic.setdefault(keys[i].topic_id, []).append(i)
            req = init_req.InitializeShareGroupStateRequest(
                group_id=keys[idx[0]].group_id, topics=tuple(
                    init_req.InitializeStateData(topic_id=tid, partitions=tuple(
                        init_req.PartitionData(partition=i32(keys[i].partition),
                                               state_epoch=i32(state_epoch),
                                               start_offset=i64(start_offset))
                        for i in ids)) for tid, ids in by_topic.items()))
            try:
                resp = await self._send(node, req)
            except Exception as e:
                log.info("InitializeShareGroupState to broker %d: %s", node, e)
                for i in idx:
                    codes[i] = ErrorCode.coordinator_not_available
                return
            got = {(t.topic_id, p.partition): ErrorCode(p.error_code)
                   for t in resp.results for p in t.partitions}
            for i in idx:
                codes[i] = got.get((keys[i].topic_id, keys[i].partition),
                                   ErrorCode.unknown_server_error)

        await asyncio.gather(*(here(i) for i in local),
                             *(there(n, idx) for n, idx in remote.items()))
        return codes

    @property
    def can_send(self) -> bool:
        """Whether state RPCs can go to other brokers (a cluster; not unit tests)."""
        return self._send is not None

    def coordinator_node(self, key: ShareKey) -> int:
        """The broker that coordinates `key`'s state: this one's id when it does (or
        with no cluster), else the leader of its state partition (-1: none now)."""
        node = self._remote(key)
        return self._node_id if node is None else node

    async def delete(self, key: ShareKey) -> ErrorCode:
        """DeleteShareGroupState: the key's state gone (tombstones, durable), here or by
        RPC 86 to its coordinator."""
        node = self._remote(key)
        if node is not None:
            (code,) = await self.send_delete(node, [key])
            return code
        err = await self.coordinator.ensure_ready(key)
        return err if err is not None else await self.coordinator.delete(key)

    async def send_delete(self, node: int, keys: Sequence[ShareKey]) -> list[ErrorCode]:
        """One DeleteShareGroupState (86) to broker `node` for `keys` (one group's):
        the code per key, in order (COORDINATOR_NOT_AVAILABLE for all when the request
        fails). A broker that does not coordinate a key answers NOT_COORDINATOR for it,
        and drops its share partition of it either way (the group delete's notice to the
        share-partition leaders, `yak/share/deletion.py`)."""
        assert self._send is not None
        by_topic: dict[Any, list[int]] = {}
        for i, key in enumerate(keys):
            by_topic.setdefault(key.topic_id, []).append(i)
        req = delete_req.DeleteShareGroupStateRequest(group_id=keys[0].group_id, topics=tuple(
            delete_req.DeleteStateData(topic_id=tid, partitions=tuple(
                delete_req.PartitionData(partition=i32(keys[i].partition)) for i in ids))
            for tid, ids in by_topic.items()))
        try:
            resp = await self._send(node, req)
        except Exception as e:
            log.info("DeleteShareGroupState to broker %d: %s", node, e)
            return [ErrorCode.coordinator_not_available] * len(keys)
        got = {(t.topic_id, p.partition): ErrorCode(p.error_code)
               for t in resp.results for p in t.partitions}
        return [got.get((k.topic_id, k.partition), ErrorCode.unknown_server_error)
                for k in keys]

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
                if code is ErrorCode.invalid_request:  # Kafka's answer for no state
                    return ReadResult(exists=False)
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


async def _as_fenced(write: Awaitable[ErrorCode]) -> ErrorCode:
    code = await write
    return ErrorCode.fenced_state_epoch if code is ErrorCode.invalid_request else code
