"""The transaction coordinator driven directly: method calls, a fake clock, and in-memory
fakes of its own log and marker interfaces (tests/txn/fakes.py).

Each test plays a producer (or an admin tool) step by step and checks the error codes
a real client would see, what reached `__transaction_state`, and which markers were
written, without a socket or a real sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from yak.coordinator.timer import ManualClock, TimerQueue
from yak.errors import (
    ErrorCode,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from yak.group import records as group_records
from yak.txn import records as rec
from yak.txn.coordinator import (
    TransactionCoordinator,
    TxnConfig,
    compat_error,
    produce_verification_error,
)
from yak.txn.state import TransactionState, TxnTransitMetadata

from .fakes import CountingProducerIds, FakeMarkerWriter, MemoryTransactionLog

pytestmark = pytest.mark.timeout(60)

S = TransactionState
E = ErrorCode
TID = "my-txn"


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(fn())


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


class Harness:
    def __init__(
        self,
        log: MemoryTransactionLog | None = None,
        markers: FakeMarkerWriter | None = None,
        clock: ManualClock | None = None,
        existing: set[tuple[str, int]] | None = None,
        pids: CountingProducerIds | None = None,
        **cfg: Any,
    ) -> None:
        cfg.setdefault("retry_backoff_ms", 100)
        self.clock = clock or ManualClock()
        self.log = log or MemoryTransactionLog(4)
        self.markers = markers or FakeMarkerWriter()
        self.pids = pids or CountingProducerIds()  # shared across restarts, as on disk
        self.timers = TimerQueue(self.clock)
        self.existing = existing
        self.coord = TransactionCoordinator(
            self.log,
            self.log,
            self.markers,
            self.pids,
            TxnConfig(**cfg),
            self.clock,
            partition_exists=(lambda tp: existing is None or tp in existing),
            timers=self.timers,
        )

    async def start(self, epoch: int = 0) -> Harness:
        for p in range(self.log.num_partitions):
            self.log.leader_epochs[p] = epoch
        await self.coord.start()  # loads every partition led here
        for p in range(self.log.num_partitions):
            await self.coord.on_election(p, epoch)  # the same term again: nothing to do
        await settle()
        return self

    async def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.timers.run_due()
        await settle()

    async def restart(self, epoch: int) -> Harness:
        """A new coordinator instance over the same log (a restart, or a failover to
        another broker that now leads the partitions at `epoch`)."""
        await self.coord.stop()
        h = Harness(self.log, self.markers, self.clock, pids=self.pids)
        return await h.start(epoch)

    async def init(
        self, tid: str = TID, timeout: int = 60_000, pid: int = -1, epoch: int = -1
    ) -> tuple[ErrorCode, int, int]:
        r = await self.coord.init_producer_id(tid, timeout, pid, epoch)
        return r.error, r.producer_id, r.producer_epoch

    def meta(self, tid: str = TID) -> Any:
        return next(m for m in self.coord.transactions() if m.transactional_id == tid)

    def states(self, tid: str = TID) -> list[S]:
        """The states written for `tid`, in log order (None for a tombstone)."""
        p = rec.partition_for(tid, self.log.num_partitions)
        out = []
        for key, value in self.log.parts[p]:
            if rec.decode_key(key) == tid:
                out.append(None if value is None else rec.decode_value(value).state)
        return out

    def last_record(self, tid: str = TID) -> TxnTransitMetadata:
        p = rec.partition_for(tid, self.log.num_partitions)
        value = [v for k, v in self.log.parts[p] if rec.decode_key(k) == tid][-1]
        assert value is not None
        return rec.decode_value(value)


async def begin(h: Harness, tps: set[tuple[str, int]], tid: str = TID) -> tuple[int, int]:
    err, pid, epoch = await h.init(tid)
    assert err is E.none
    res = await h.coord.add_partitions_to_txn(tid, pid, epoch, tps)
    assert set(res.values()) == {E.none}
    return pid, epoch


# ------------------------------------------------------------------ InitProducerId


def test_init_producer_id_allocates_then_bumps_the_epoch() -> None:
    async def body() -> None:
        h = await Harness().start()
        assert await h.init() == (E.none, 1000, 0)
        assert await h.init() == (E.none, 1000, 1)
        assert h.states() == [S.EMPTY, S.EMPTY]
        assert h.last_record().producer_epoch == 1
        (d,) = h.coord.describe_transactions([TID])
        assert (d.error, d.state, d.producer_id, d.producer_epoch) == (E.none, "Empty", 1000, 1)
        # a different id gets a different producer id
        assert (await h.init("other"))[1] == 1001

    run(body)


def test_init_producer_id_validation() -> None:
    async def body() -> None:
        h = await Harness(transaction_max_timeout_ms=10_000).start()
        assert (await h.init(""))[0] is E.invalid_request
        assert (await h.init(timeout=0))[0] is E.invalid_transaction_timeout
        assert (await h.init(timeout=10_001))[0] is E.invalid_transaction_timeout
        assert (await h.init(timeout=10_000))[0] is E.none  # the maximum itself is fine
        assert (await h.init(pid=5, timeout=1000))[0] is E.invalid_request  # id, no epoch
        assert (await h.init(epoch=5, timeout=1000))[0] is E.invalid_request
        r = await h.coord.init_producer_id(None, 0)  # idempotent producer: a fresh id
        assert (r.error, r.producer_epoch) == (E.none, 0)
        h.pids.fail_next = KafkaStorageError("metadata store unwritable")
        assert (await h.init("fresh", timeout=1000))[0] is E.kafka_storage_error

    run(body)


def test_kip360_retry_fence_and_unknown_producer() -> None:
    async def body() -> None:
        h = await Harness().start()
        _, pid, e0 = await h.init()
        assert await h.init(pid=pid, epoch=e0) == (E.none, pid, e0 + 1)
        # the producer never heard the answer and asks again: same epoch, no second bump
        assert await h.init(pid=pid, epoch=e0) == (E.none, pid, e0 + 1)
        assert (await h.init(pid=pid, epoch=e0 + 7))[0] is E.producer_fenced
        assert (await h.init(pid=999_999, epoch=3))[0] is E.producer_fenced
        # an id never seen: the producer recovers from UNKNOWN_PRODUCER_ID with a fresh id
        err, new_pid, epoch = await h.init("brand-new", pid=77, epoch=4)
        assert err is E.none and new_pid != 77 and epoch == 0

    run(body)


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    async def body() -> None:
        h = Harness()
        p = rec.partition_for(TID, 4)
        seed = TxnTransitMetadata(500, -1, 32765, -1, 60_000, S.COMPLETE_COMMIT, frozenset(), 1, 2)
        h.log.parts[p].append((rec.encode_key(TID), rec.encode_value(seed)))
        await h.start()
        assert await h.init() == (E.none, 500, 32766)
        err, pid, epoch = await h.init()  # 32766 is the last epoch handed out
        assert (err, epoch) == (E.none, 0) and pid != 500
        # KIP-360 form: the producer names its exhausted epoch; a retry is recognised
        h2 = Harness()
        h2.log.parts[p].append((rec.encode_key(TID), rec.encode_value(seed)))
        await h2.start()
        assert await h2.init() == (E.none, 500, 32766)
        err, pid2, epoch = await h2.init(pid=500, epoch=32766)
        assert (err, epoch) == (E.none, 0) and pid2 != 500
        assert h2.meta().last_producer_id == 500 and h2.meta().last_producer_epoch == 32766
        assert await h2.init(pid=500, epoch=32766) == (E.none, pid2, 0)

    run(body)


def test_concurrent_init_while_the_first_write_is_in_flight() -> None:
    async def body() -> None:
        h = await Harness().start()
        await h.init()
        h.log.hold = asyncio.Event()
        first = asyncio.ensure_future(h.init())
        await settle()
        assert (await h.init())[0] is E.concurrent_transactions
        h.log.hold.set()
        assert (await first)[0] is E.none

    run(body)


# ------------------------------------------------------------------ commit / abort


def test_commit_writes_markers_then_completes() -> None:
    async def body() -> None:
        h = await Harness().start()
        pid, epoch = await begin(h, {("orders", 0), ("orders", 1)})
        (d,) = h.coord.describe_transactions([TID])
        assert d.state == "Ongoing" and d.topics == {"orders": [0, 1]}
        assert d.transaction_start_time_ms == h.clock.now
        assert h.coord.open_transactions() == 1
        assert await h.coord.end_txn(TID, pid, epoch, commit=True) is E.none
        await settle()
        assert sorted(h.markers.written) == [
            (("orders", 0), pid, epoch, True, 0),
            (("orders", 1), pid, epoch, True, 0),
        ]
        assert h.states() == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        assert h.meta().state is S.COMPLETE_COMMIT and not h.meta().partitions
        assert h.coord.open_transactions() == 0 and h.coord.stats.commits == 1
        # the next transaction on the same producer starts from CompleteCommit
        res = await h.coord.add_partitions_to_txn(TID, pid, epoch, {("orders", 2)})
        assert res == {("orders", 2): E.none}
        assert await h.coord.end_txn(TID, pid, epoch, commit=False) is E.none
        await settle()
        assert h.states()[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
        assert h.markers.written[-1] == (("orders", 2), pid, epoch, False, 0)

    run(body)


def test_end_txn_error_paths() -> None:
    async def body() -> None:
        # completion_wait_ms=0: Kafka's answers while a completion runs (no waiting)
        h = await Harness(markers=FakeMarkerWriter(manual=True), completion_wait_ms=0).start()
        assert await h.coord.end_txn("nobody", 1, 0, True) is E.invalid_producer_id_mapping
        assert await h.coord.end_txn("", 1, 0, True) is E.invalid_request
        _, pid, epoch = await h.init()
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.invalid_txn_state  # no txn
        assert await h.coord.end_txn(TID, pid + 1, epoch, True) is E.invalid_producer_id_mapping
        await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 0)})
        assert await h.coord.end_txn(TID, pid, epoch - 1, True) is E.producer_fenced
        assert await h.coord.end_txn(TID, pid, epoch + 1, True) is E.producer_fenced
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.none
        await settle()
        # PrepareCommit, markers not yet written: everything waits (Kafka's pending
        # CompleteCommit answers before the state is even looked at)
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.concurrent_transactions
        assert await h.coord.end_txn(TID, pid, epoch, False) is E.concurrent_transactions
        res = await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 1)})
        assert res == {("t", 1): E.concurrent_transactions}
        assert (await h.init())[0] is E.concurrent_transactions
        (call,) = h.markers.pending()
        h.markers.answer(call)
        await settle()
        assert h.meta().state is S.COMPLETE_COMMIT
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.none  # retried commit
        assert await h.coord.end_txn(TID, pid, epoch, False) is E.invalid_txn_state

    run(body)


def test_new_producer_instance_aborts_the_dangling_transaction_and_fences_the_old() -> None:
    async def body() -> None:
        h = await Harness().start()
        pid, old_epoch = await begin(h, {("t", 0), ("t", 1)})
        # producer B starts with the same transactional.id
        assert (await h.init())[0] is E.concurrent_transactions
        await settle()
        assert {w[3] for w in h.markers.written} == {False}  # only ABORT markers
        assert {w[2] for w in h.markers.written} == {old_epoch + 1}  # with the fenced epoch
        assert h.meta().state is S.COMPLETE_ABORT
        assert h.coord.stats.fenced == 1 and h.coord.stats.aborts == 1
        err, pid_b, epoch_b = await h.init()
        assert (err, pid_b, epoch_b) == (E.none, pid, old_epoch + 2)
        # the zombie: every request is fenced, none of its data is ever committed
        assert await h.coord.end_txn(TID, pid, old_epoch, True) is E.producer_fenced
        res = await h.coord.add_partitions_to_txn(TID, pid, old_epoch, {("t", 2)})
        assert res == {("t", 2): E.producer_fenced}
        assert (
            E.producer_fenced
            is h.coord.verify_partitions(TID, pid, old_epoch, {("t", 0)})[("t", 0)]
        )
        assert not any(w[3] for w in h.markers.written)

    run(body)


def test_producer_fenced_maps_to_invalid_producer_epoch_for_old_versions() -> None:
    pf, ipe = E.producer_fenced, E.invalid_producer_epoch
    assert compat_error(22, 3, pf) is ipe and compat_error(22, 4, pf) is pf
    for api in (24, 25, 26):
        assert compat_error(api, 1, pf) is ipe and compat_error(api, 2, pf) is pf
    assert compat_error(26, 0, E.concurrent_transactions) is E.concurrent_transactions
    lip = E.coordinator_load_in_progress
    assert compat_error(28, 1, lip) is E.coordinator_not_available
    assert compat_error(28, 2, lip) is lip


def test_verification_failures_as_produce_errors() -> None:
    v = produce_verification_error
    assert v(E.transaction_abortable) is E.invalid_txn_state
    assert v(E.producer_fenced) is E.invalid_producer_epoch
    for retriable in (E.concurrent_transactions, E.not_coordinator, E.coordinator_load_in_progress):
        assert v(retriable) is E.not_enough_replicas
    assert v(E.invalid_producer_id_mapping) is E.invalid_producer_id_mapping


# ------------------------------------------------------------------ AddPartitions / verify


def test_add_partitions_rules() -> None:
    async def body() -> None:
        h = await Harness(existing={("t", 0), ("t", 1)}).start()
        _, pid, epoch = await h.init()
        res = await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 0), ("nope", 0)})
        assert res == {
            ("t", 0): E.operation_not_attempted,
            ("nope", 0): E.unknown_topic_or_partition,
        }
        assert h.meta().state is S.EMPTY
        assert (await h.coord.add_partitions_to_txn("nobody", 1, 0, {("t", 0)})) == {
            ("t", 0): E.invalid_producer_id_mapping
        }
        assert (await h.coord.add_partitions_to_txn(TID, pid, epoch + 1, {("t", 0)})) == {
            ("t", 0): E.producer_fenced
        }
        assert (await h.coord.add_partitions_to_txn("", pid, epoch, {("t", 0)})) == {
            ("t", 0): E.invalid_request
        }
        await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 0)})
        writes = h.log.appends
        res = await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 0)})
        assert res == {("t", 0): E.none} and h.log.appends == writes  # already in: no write
        start = h.meta().txn_start_timestamp
        h.clock.advance(500)
        await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 1)})
        assert h.meta().partitions == {("t", 0), ("t", 1)}
        assert h.meta().txn_start_timestamp == start  # still the same transaction

    run(body)


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    async def body() -> None:
        h = await Harness(offsets_topic_num_partitions=50).start()
        _, pid, epoch = await h.init()
        assert await h.coord.add_offsets_to_txn(TID, pid, epoch, "billing") is E.none
        expected = ("__consumer_offsets", group_records.partition_for("billing", 50))
        assert h.meta().partitions == {expected}
        assert await h.coord.add_offsets_to_txn(TID, pid, epoch + 1, "billing") is E.producer_fenced

    run(body)


def test_verify_only_kip890() -> None:
    async def body() -> None:
        h = await Harness(markers=FakeMarkerWriter(manual=True)).start()
        pid, epoch = await begin(h, {("t", 0)})
        v = h.coord.verify_partitions(TID, pid, epoch, {("t", 0), ("t", 1)})
        assert v == {("t", 0): E.none, ("t", 1): E.transaction_abortable}
        assert h.meta().partitions == {("t", 0)}  # verification never adds
        assert set(h.coord.verify_partitions(TID, pid + 1, epoch, {("t", 0)}).values()) == {
            E.invalid_producer_id_mapping
        }
        assert set(h.coord.verify_partitions("x", pid, epoch, {("t", 0)}).values()) == {
            E.invalid_producer_id_mapping
        }
        assert set(h.coord.verify_partitions("", pid, epoch, {("t", 0)}).values()) == {
            E.invalid_request
        }
        await h.coord.end_txn(TID, pid, epoch, True)
        assert set(h.coord.verify_partitions(TID, pid, epoch, {("t", 0)}).values()) == {
            E.concurrent_transactions
        }

    run(body)


def test_add_partitions_waits_for_the_previous_transactions_completion() -> None:
    """The next transaction's AddPartitionsToTxn (or AddOffsetsToTxn) meeting the previous
    one's markers in flight waits for them instead of answering CONCURRENT_TRANSACTIONS,
    which librdkafka and the Java client retry only after 20 ms."""

    async def body() -> None:
        h = await Harness(markers=FakeMarkerWriter(manual=True)).start()
        pid, epoch = await begin(h, {("t", 0)})
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.none
        await settle()
        add = asyncio.ensure_future(h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 1)}))
        offsets = asyncio.ensure_future(h.coord.add_offsets_to_txn(TID, pid, epoch, "g"))
        await settle()
        assert not add.done() and not offsets.done()  # waiting, not refused
        assert h.meta().state is S.PREPARE_COMMIT
        (call,) = h.markers.pending()
        h.markers.answer(call)
        assert await asyncio.wait_for(add, 5) == {("t", 1): E.none}
        # the second waiter met the first one's write in flight: a plain retry's answer
        assert await asyncio.wait_for(offsets, 5) in (E.none, E.concurrent_transactions)
        states = h.states()
        done = states.index(S.COMPLETE_COMMIT)
        assert states[done - 1] is S.PREPARE_COMMIT and states[done + 1] is S.ONGOING
        assert h.meta().state is S.ONGOING and ("t", 1) in h.meta().partitions
        assert ("t", 0) not in h.meta().partitions  # a new transaction, not the old one

    run(body)


def test_add_partitions_wait_is_bounded_and_released_by_resignation() -> None:
    async def body() -> None:
        h = await Harness(markers=FakeMarkerWriter(manual=True), completion_wait_ms=50).start()
        pid, epoch = await begin(h, {("t", 0)})
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.none
        await settle()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        res = await asyncio.wait_for(h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 1)}), 5)
        assert res == {("t", 1): E.concurrent_transactions}  # markers never answered
        assert 0.04 <= loop.time() - t0 < 2
        # a waiter is woken when the coordinator gives the partition up
        add = asyncio.ensure_future(h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 1)}))
        await settle()
        assert not add.done()
        h.coord.on_resignation(rec.partition_for(TID, h.log.num_partitions))
        await settle()
        assert add.done() and add.result() == {("t", 1): E.not_coordinator}
        assert h.coord.pending_marker_jobs() == 0

    run(body)


# ------------------------------------------------------------------ markers


def test_marker_retries_skips_and_fencing() -> None:
    async def body() -> None:
        m = FakeMarkerWriter(
            errors={
                ("a", 0): [E.not_leader_or_follower, E.request_timed_out],
                ("gone", 0): [E.unknown_topic_or_partition],
            }
        )
        h = await Harness(markers=m).start()
        pid, epoch = await begin(h, {("a", 0), ("b", 0), ("gone", 0)})
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.none
        await settle()
        assert h.meta().state is S.PREPARE_COMMIT and h.meta().partitions == {("a", 0)}
        await h.advance(50)
        assert len(m.calls) == 1  # backoff not over
        await h.advance(60)
        assert len(m.calls) == 2 and h.meta().state is S.PREPARE_COMMIT
        await h.advance(100)
        assert h.meta().state is S.COMPLETE_COMMIT
        assert m.calls[-1].partitions == {("a", 0)}  # only the failed partition is retried
        assert sorted(w[0] for w in m.written) == [("a", 0), ("b", 0)]
        assert h.coord.stats.marker_retries == 2

        # a newer producer epoch / coordinator already owns the partition: give up here
        m.errors[("c", 0)] = [E.transaction_coordinator_fenced]
        _, pid2, epoch2 = await h.init("t2")
        await h.coord.add_partitions_to_txn("t2", pid2, epoch2, {("c", 0)})
        assert await h.coord.end_txn("t2", pid2, epoch2, True) is E.none
        await h.advance(1000)
        assert h.meta("t2").state is S.PREPARE_COMMIT and h.meta("t2").pending
        assert h.coord.pending_marker_jobs() == 0

    run(body)


def test_marker_writer_exception_is_retried() -> None:
    class Flaky(FakeMarkerWriter):
        failures = 2

        async def write_markers(self, *a: Any, **kw: Any) -> Any:
            if self.failures:
                self.failures -= 1
                raise ConnectionError("broker 2 unreachable")
            return await super().write_markers(*a, **kw)

    async def body() -> None:
        h = await Harness(markers=Flaky()).start()
        pid, epoch = await begin(h, {("a", 0)})
        await h.coord.end_txn(TID, pid, epoch, False)
        await settle()
        assert h.meta().state is S.PREPARE_ABORT
        await h.advance(100)
        await h.advance(100)
        assert h.meta().state is S.COMPLETE_ABORT

    run(body)


# ------------------------------------------------------------------ log failures


def test_log_append_failures_map_to_coordinator_errors_and_change_nothing() -> None:
    async def body() -> None:
        h = await Harness().start()
        _, pid, epoch = await h.init()
        cases = [
            (error_for_code(E.not_enough_replicas), E.coordinator_not_available),
            (UnknownTopicOrPartitionError(), E.coordinator_not_available),
            (NotLeaderOrFollowerError(), E.not_coordinator),
            (KafkaStorageError(), E.not_coordinator),
            (error_for_code(E.message_too_large), E.unknown_server_error),
        ]
        for exc, expected in cases:
            h.log.fail_next.append(exc)
            res = await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 0)})
            assert res == {("t", 0): expected}
            assert h.meta().state is S.EMPTY and not h.meta().pending
        await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 0)})
        h.log.fail_next.append(KafkaStorageError())
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.not_coordinator
        assert h.meta().state is S.ONGOING and not h.meta().pending
        assert not h.markers.calls  # nothing decided, nothing sent
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.none

    run(body)


def test_failed_completion_write_is_retried_until_it_lands() -> None:
    async def body() -> None:
        h = await Harness(markers=FakeMarkerWriter(manual=True)).start()
        pid, epoch = await begin(h, {("a", 0)})
        await h.coord.end_txn(TID, pid, epoch, True)
        await settle()
        h.log.fail_next += [error_for_code(E.not_enough_replicas), KafkaStorageError()]
        h.markers.answer(h.markers.pending()[0])
        await settle()
        assert h.meta().state is S.PREPARE_COMMIT and h.meta().pending
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.concurrent_transactions
        await h.advance(100)
        await h.advance(100)
        assert h.meta().state is S.COMPLETE_COMMIT
        assert h.states()[-1] is S.COMPLETE_COMMIT

    run(body)


def test_first_init_that_fails_to_write_leaves_an_unusable_placeholder() -> None:
    async def body() -> None:
        h = await Harness().start()
        h.log.fail_next.append(error_for_code(E.request_timed_out))
        assert (await h.init())[0] is E.coordinator_not_available
        assert h.meta().producer_epoch == -1  # as in Kafka: the id exists, epoch -1
        assert await h.coord.end_txn(TID, 1000, 0, True) is E.producer_fenced
        assert await h.init() == (E.none, 1000, 0)  # the retry reuses the producer id

    run(body)


# ------------------------------------------------------------------ ownership and reload


def test_not_coordinator_loading_and_not_started() -> None:
    async def body() -> None:
        h = Harness()
        assert (await h.init())[0] is E.coordinator_not_available
        await h.coord.start()
        assert (await h.init())[0] is E.not_coordinator
        p = rec.partition_for(TID, 4)
        # A load is one synchronous step of the coordinator runtime (as it was in
        # practice before: the replay never yielded), so COORDINATOR_LOAD_IN_PROGRESS is
        # only answered for a shard the runtime reports loading (tests/coordinator).
        h.log.leader_epochs[p] = 3
        await h.coord.on_election(p, 3)
        assert (await h.init())[0] is E.none
        h.coord.on_resignation(p, 2)  # stale resignation: ignored
        assert (await h.init())[0] is E.none
        h.coord.on_resignation(p, 3)
        assert (await h.init())[0] is E.not_coordinator

    run(body)


def test_resignation_during_a_write_applies_nothing() -> None:
    async def body() -> None:
        h = await Harness().start()
        _, pid, epoch = await h.init()
        h.log.hold = asyncio.Event()
        add = asyncio.ensure_future(h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 0)}))
        await settle()
        p = rec.partition_for(TID, 4)
        h.coord.on_resignation(p)
        h.log.hold.set()
        assert (await add) == {("t", 0): E.not_coordinator}

    run(body)


def test_restart_mid_commit_resends_the_markers_and_completes() -> None:
    async def body() -> None:
        h = await Harness(markers=FakeMarkerWriter(manual=True)).start()
        pid, epoch = await begin(h, {("a", 0), ("b", 3)})
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.none
        await settle()
        old_call = h.markers.pending()[0]
        assert h.states()[-1] is S.PREPARE_COMMIT
        # leadership of the partitions moves before the markers are acknowledged
        for p in range(4):
            h.coord.on_resignation(p)
        h2 = await Harness(h.log, h.markers, h.clock, pids=h.pids).start(epoch=1)
        assert h2.meta().state is S.PREPARE_COMMIT
        new_call = h2.markers.pending()[-1]
        assert new_call is not old_call and new_call.coordinator_epoch == 1
        assert new_call.commit and new_call.partitions == {("a", 0), ("b", 3)}
        h.markers.answer(old_call)  # the deposed coordinator's late answer writes nothing
        await settle()
        assert h2.states()[-1] is S.PREPARE_COMMIT and h.log.appends == 3
        h2.markers.answer(new_call)
        await settle()
        assert h2.meta().state is S.COMPLETE_COMMIT
        assert h2.states()[-1] is S.COMPLETE_COMMIT
        assert h2.meta().producer_epoch == epoch  # the producer carries on
        assert await h2.coord.end_txn(TID, pid, epoch, True) is E.none

    run(body)


def test_restart_with_an_open_transaction_aborts_it_at_its_timeout() -> None:
    async def body() -> None:
        h = await Harness().start()
        _, pid, epoch = await h.init(timeout=5_000)
        await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 0)})
        h2 = await h.restart(epoch=1)
        assert h2.meta().state is S.ONGOING and h2.meta().txn_timeout_ms == 5_000
        await h2.advance(10_000)  # one sweep interval
        assert h2.meta().state is S.COMPLETE_ABORT and h2.meta().producer_epoch == epoch + 1
        assert h2.markers.written[-1] == (("t", 0), pid, epoch + 1, False, 1)

    run(body)


def test_unreadable_records_are_skipped_on_load() -> None:
    async def body() -> None:
        h = Harness()
        p = rec.partition_for(TID, 4)
        good = TxnTransitMetadata(9, -1, 2, -1, 1000, S.COMPLETE_ABORT, frozenset(), 1, 2)
        h.log.parts[p] += [
            (rec.encode_key(TID), rec.encode_value(good)),
            (rec.encode_key("junk"), b"\x00\x09garbage"),
            (b"\x00\x05?", b""),  # unknown key version
            (rec.encode_key("gone"), rec.encode_value(good)),
            (rec.encode_key("gone"), None),
        ]
        await h.start()
        assert [m.transactional_id for m in h.coord.transactions()] == [TID]
        assert h.meta().producer_epoch == 2

    run(body)


# ------------------------------------------------------------------ timeouts and expiry


def test_timed_out_transaction_is_aborted_and_its_producer_fenced() -> None:
    async def body() -> None:
        h = await Harness(abort_timed_out_interval_ms=1_000).start()
        _, pid, epoch = await h.init(timeout=5_000)
        await h.coord.add_partitions_to_txn(TID, pid, epoch, {("t", 0)})
        await h.advance(4_000)
        assert h.meta().state is S.ONGOING
        await h.advance(2_000)
        assert h.meta().state is S.COMPLETE_ABORT
        assert h.coord.stats.timed_out == 1
        assert h.markers.written == [(("t", 0), pid, epoch + 1, False, 0)]
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.producer_fenced
        assert (await h.init())[2] == epoch + 2  # a restarted producer carries on

    run(body)


def test_idle_transactional_ids_expire_but_open_ones_do_not() -> None:
    async def body() -> None:
        h = await Harness(
            transactional_id_expiration_ms=10_000, remove_expired_interval_ms=1_000
        ).start()
        await h.init("idle")
        await begin(h, {("t", 0)}, tid="busy")
        await h.advance(12_000)
        (d,) = h.coord.describe_transactions(["idle"])
        assert d.error is E.transactional_id_not_found
        assert h.states("idle")[-1] is None  # a tombstone
        assert h.meta("busy").state is S.ONGOING  # never expired while open
        h2 = await h.restart(epoch=1)
        assert [m.transactional_id for m in h2.coord.transactions()] == ["busy"]
        assert await h2.init("idle") == (E.none, 1002, 0)  # a new producer id
        assert h.coord.stats.expired_ids == 1

    run(body)


# ------------------------------------------------------------------ describe / list


def test_list_transactions_filters() -> None:
    async def body() -> None:
        h = await Harness().start()
        await begin(h, {("t", 0)}, tid="spark-a")
        h.clock.advance(10_000)
        await begin(h, {("t", 1)}, tid="spark-b")
        await h.init("other")
        r = h.coord.list_transactions()
        assert r.error is E.none
        assert [(t.transactional_id, t.state) for t in r.transactions] == [
            ("other", "Empty"),
            ("spark-a", "Ongoing"),
            ("spark-b", "Ongoing"),
        ]
        r = h.coord.list_transactions(state_filters=["Ongoing", "Bogus"])
        assert [t.transactional_id for t in r.transactions] == ["spark-a", "spark-b"]
        assert r.unknown_state_filters == ["Bogus"]
        r = h.coord.list_transactions(state_filters=["Ongoing"], duration_filter_ms=5_000)
        assert [t.transactional_id for t in r.transactions] == ["spark-a"]
        pid_b = h.meta("spark-b").producer_id
        r = h.coord.list_transactions(producer_id_filters=[pid_b])
        assert [t.transactional_id for t in r.transactions] == ["spark-b"]
        r = h.coord.list_transactions(transactional_id_pattern="spark-.*")
        assert [t.transactional_id for t in r.transactions] == ["spark-a", "spark-b"]
        r = h.coord.list_transactions(transactional_id_pattern="spark")  # matched in full
        assert r.transactions == []
        assert h.coord.list_transactions(transactional_id_pattern="(").error is (
            E.invalid_regular_expression
        )
        ds = h.coord.describe_transactions(["spark-b", "", "missing"])
        assert [d.error for d in ds] == [E.none, E.invalid_request, E.transactional_id_not_found]
        assert ds[0].topics == {"t": [1]} and ds[0].transaction_timeout_ms == 60_000
        await h.coord.stop()
        assert h.coord.list_transactions().error is E.coordinator_not_available
        assert h.coord.describe_transactions(["x"])[0].error is E.coordinator_not_available

    run(body)


def test_a_loaded_decision_waits_for_the_high_watermark_before_its_markers() -> None:
    """A new coordinator loads to the log end, so a PrepareCommit it loads may not be
    committed yet (its old leader died before followers copied it). Its markers wait until
    the high watermark covers what was loaded: sending them at once, then dying, would let
    a coordinator whose log lacks the record abort it elsewhere (a torn transaction).
    Meanwhile the producer gets CONCURRENT_TRANSACTIONS; if leadership moves on first, no
    marker is ever sent by this coordinator."""
    async def body() -> None:
        h = await Harness(markers=FakeMarkerWriter(manual=True)).start()
        pid, epoch = await begin(h, {("a", 0)})
        assert await h.coord.end_txn(TID, pid, epoch, True) is E.none
        await settle()
        for p in range(4):
            h.coord.on_resignation(p)
        calls = len(h.markers.calls)
        h.log.uncommitted = asyncio.Event()
        h2 = await Harness(h.log, h.markers, h.clock, pids=h.pids).start(epoch=1)
        assert h2.meta().state is S.PREPARE_COMMIT
        await settle()
        assert len(h2.markers.calls) == calls  # not while the record may be uncommitted
        res = await h2.coord.add_partitions_to_txn(TID, pid, epoch, {("b", 0)})
        assert res == {("b", 0): E.concurrent_transactions}
        h.log.uncommitted.set()  # the high watermark reaches the loaded end
        await settle()
        assert len(h2.markers.calls) == calls + 1
        call = h2.markers.pending()[-1]
        assert call.commit and call.coordinator_epoch == 1
        h2.markers.answer(call)
        await settle()
        assert h2.meta().state is S.COMPLETE_COMMIT

        # Deposed before the high watermark moved: this coordinator sends nothing.
        pid, epoch = await begin(h2, {("c", 0)}, tid="t3")
        assert await h2.coord.end_txn("t3", pid, epoch, False) is E.none
        await settle()  # PrepareAbort written; its markers are left unanswered
        for p in range(4):
            h2.coord.on_resignation(p)
        calls = len(h2.markers.calls)
        h.log.uncommitted = asyncio.Event()
        h3 = await Harness(h.log, h.markers, h.clock, pids=h.pids).start(epoch=2)
        assert h3.meta("t3").state is S.PREPARE_ABORT
        for p in range(4):
            h.log.leader_epochs[p] = 3  # another broker leads now
            h3.coord.on_resignation(p)
        h.log.uncommitted.set()
        await settle()
        assert len(h3.markers.calls) == calls

    run(body)
