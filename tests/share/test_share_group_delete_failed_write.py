"""A share group's delete whose tombstones' write fails leaves the group as it was
(yak/share/group.py's `delete_group`, in the coordinator runtime's shape: a state change
is applied only with the write of its records), through the real `GroupCoordinator` and
its runtime on the in-memory coordinator log (`fail_next` fails the next append, as a
lost leadership or a storage error does), replayed by a new coordinator on the same log
as in tests/share/test_share_group_delete_tombstones.py.

The delete used to drop the group from memory before its tombstones were written: when
the write failed, DeleteGroups answered the error, the client's retry found no group
(GROUP_ID_NOT_FOUND, nothing written), and the group's records stayed live, so the next
coordinator's replay brought the deleted group back."""

from __future__ import annotations

import asyncio

from tests.share.test_share_group_delete_tombstones import TOPIC_ID, Node, _topics
from yak.coordinator.memory import MemoryCoordinatorLog
from yak.coordinator.timer import ManualClock
from yak.errors import ErrorCode, KafkaStorageError, NotLeaderOrFollowerError
from yak.share import records as rec
from yak.share.coordinator import ShareCoordinator
from yak.share.deletion import delete_share_group
from yak.share.manager import ShareConfig, ShareManager
from yak.share.persister import CoordinatorPersister


def test_a_failed_tombstone_write_keeps_the_group_and_a_retry_deletes_it() -> None:
    async def scenario() -> None:
        log, clock = MemoryCoordinatorLog(4), ManualClock()
        a = Node(log, clock)
        joined = await a.hb("m1", 0)
        assert joined.error is ErrorCode.none
        assert (await a.hb("m1", -1)).error is ErrorCode.none  # left: the group is empty
        epoch = a.groups.get("g").epoch  # type: ignore[union-attr]
        for failure, code in ((NotLeaderOrFollowerError("lost leadership"),
                               ErrorCode.not_coordinator),
                              (KafkaStorageError("a failed write"), ErrorCode.not_coordinator)):
            log.fail_next.append(failure)
            assert await a.groups.delete_group("g") is code
            g = a.groups.get("g")
            assert g is not None and g.epoch == epoch and not g.members, g  # as it was
            replayed = Node(log, clock).groups.get("g")  # memory and log agree
            assert replayed is not None and replayed.epoch == epoch
        assert await a.groups.delete_group("g") is ErrorCode.none  # the retry
        assert a.groups.get("g") is None and "g" not in a.groups.pending
        assert Node(log, clock).groups.get("g") is None  # a new coordinator: no group
    asyncio.run(scenario())


def test_a_failed_delete_keeps_the_tombstones_it_still_owed() -> None:
    """A departed member's tombstones owed (their write failed) survive a failed delete
    and go with its retry: the group id used again gets no ghost."""
    async def scenario() -> None:
        log, clock = MemoryCoordinatorLog(4), ManualClock()
        a = Node(log, clock)
        assert (await a.hb("m1", 0)).error is ErrorCode.none
        clock.advance(46_000)
        assert a.groups.expire_members() == [("g", "m1")]
        log.fail_next.append(NotLeaderOrFollowerError("a failed write"))
        assert await a.groups.flush("g") is ErrorCode.not_coordinator  # the sweep's write
        log.fail_next.append(NotLeaderOrFollowerError("a failed write"))
        assert await a.groups.delete_group("g") is ErrorCode.not_coordinator
        assert a.groups.get("g") is not None and a.groups.pending["g"]
        assert await a.groups.delete_group("g") is ErrorCode.none
        b = Node(log, clock)
        assert b.groups.get("g") is None
        assert (await b.hb("m2", 0)).error is ErrorCode.none
        g = Node(log, clock).groups.get("g")
        assert g is not None and set(g.members) == {"m2"}, g.members
    asyncio.run(scenario())


def test_a_member_that_joins_while_the_tombstones_commit_keeps_the_group() -> None:
    """A join after the delete's tombstones (appended, not yet committed) is written
    after them: the log's replay has the group with that member, and so does memory."""
    async def scenario() -> None:
        log, clock = MemoryCoordinatorLog(4), ManualClock()
        a = Node(log, clock)
        assert (await a.hb("m1", 0)).error is ErrorCode.none
        assert (await a.hb("m1", -1)).error is ErrorCode.none
        log.hold = asyncio.Event()
        delete = asyncio.ensure_future(a.groups.delete_group("g"))
        await asyncio.sleep(0)  # its tombstones appended, waiting to commit
        assert not delete.done() and log.appends == 3  # m1's join, leave, the tombstones
        join = asyncio.ensure_future(a.hb("m2", 0))
        for _ in range(100):  # until m2 joined the group in memory (its write held too)
            await asyncio.sleep(0)
            if a.groups.is_member("g", "m2"):
                break
        assert a.groups.is_member("g", "m2") and not delete.done()
        log.hold.set()
        assert await delete is ErrorCode.none
        assert (await join).error is ErrorCode.none
        g, replayed = a.groups.get("g"), Node(log, clock).groups.get("g")
        assert g is not None and replayed is not None
        assert set(g.members) == set(replayed.members) == {"m2"}
        assert g.epoch == replayed.epoch
    asyncio.run(scenario())


def test_delete_groups_of_a_share_group_answers_the_failed_write_and_its_retry_deletes() -> None:
    """The DeleteGroups path (yak/share/deletion.py's `delete_share_group`): the share
    state deleted through the share coordinator, then the tombstones; their failed write
    is the answer, and the client's retry (the group still known here) deletes the group
    instead of answering GROUP_ID_NOT_FOUND."""
    async def scenario() -> None:
        log, clock = MemoryCoordinatorLog(4), ManualClock()
        state_log = MemoryCoordinatorLog(num_partitions=3, topic=rec.SHARE_STATE_TOPIC)
        state = ShareCoordinator(state_log, state_log, clock)
        state.runtime.load_led_partitions()
        share = ShareManager(ShareConfig(), clock, None,  # type: ignore[arg-type]
                             _topics, 0, CoordinatorPersister(state))
        a = Node(log, clock)
        share.groups = a.groups
        assert (await a.hb("m1", 0)).error is ErrorCode.none
        assert (await a.hb("m1", -1)).error is ErrorCode.none
        topics = [("q", TOPIC_ID, 3)]
        log.fail_next.append(KafkaStorageError("a failed write"))
        assert await delete_share_group(share, "g", topics) is ErrorCode.not_coordinator
        assert a.groups.get("g") is not None
        assert Node(log, clock).groups.get("g") is not None
        assert await delete_share_group(share, "g", topics) is ErrorCode.none  # the retry
        assert a.groups.get("g") is None and Node(log, clock).groups.get("g") is None
        assert await delete_share_group(share, "g", topics) is ErrorCode.group_id_not_found
    asyncio.run(scenario())
