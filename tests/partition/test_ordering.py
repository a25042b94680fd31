"""EffectTurn (a connection's order of effects) and the KIP-890 VerificationGuard of a
Partition, on their own."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yak.errors import ErrorCode, InvalidTxnStateError
from yak.partition import Partition, PartitionState, ReplicaManager
from yak.partition.ordering import EffectTurn
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager


def test_first_turn_is_ready_and_release_is_idempotent() -> None:
    t = EffectTurn(None)
    assert t.ready and not t.done
    t.release()
    t.release()
    assert t.done
    assert EffectTurn(t).ready  # a released predecessor holds no one


def test_a_turn_waits_for_every_earlier_release() -> None:
    async def main() -> list[str]:
        order: list[str] = []
        a = EffectTurn(None)
        b = EffectTurn(a)
        c = EffectTurn(b)

        async def effect(name: str, turn: EffectTurn, delay: float) -> None:
            await asyncio.sleep(delay)  # e.g. a remote verification before the effect
            await turn.wait()
            order.append(name)
            turn.release()

        await asyncio.gather(effect("c", c, 0), effect("b", b, 0.01), effect("a", a, 0.03))
        return order

    assert asyncio.run(main()) == ["a", "b", "c"]


def test_release_out_of_order_waits_for_the_ones_before() -> None:
    """A request that ends early (refused before its effects) releases at once; the one
    after it still waits for the requests before both."""
    a = EffectTurn(None)
    b = EffectTurn(a)
    c = EffectTurn(b)
    b.release()
    assert not c.ready and not b.done
    a.release()
    assert a.done and b.done and c.ready


def test_a_cancelled_waiter_does_not_block_its_successor() -> None:
    async def main() -> bool:
        a = EffectTurn(None)
        b = EffectTurn(a)
        c = EffectTurn(b)
        waiting_b = asyncio.ensure_future(b.wait())
        waiting_c = asyncio.ensure_future(c.wait())
        await asyncio.sleep(0)
        waiting_b.cancel()  # b's connection closed while it waited
        with pytest.raises(asyncio.CancelledError):
            await waiting_b
        b.release()  # the connection releases it however the request ended
        assert not waiting_c.done()
        a.release()
        await asyncio.wait_for(waiting_c, 1)
        return c.ready

    assert asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(delays=st.lists(st.integers(0, 5), min_size=1, max_size=12), seed=st.integers(0, 1000))
def test_effects_land_in_arrival_order_whatever_each_awaits(delays: list[int],
                                                            seed: int) -> None:
    """Random awaits before the effect, random early releases: the effects that happen
    happen in arrival order."""
    rng = random.Random(seed)
    skips = [rng.random() < 0.2 for _ in delays]

    async def main() -> list[int]:
        done: list[int] = []
        turns: list[EffectTurn] = []
        prev: EffectTurn | None = None
        for _ in delays:
            prev = EffectTurn(prev)
            turns.append(prev)

        async def request(i: int) -> None:
            try:
                for _ in range(delays[i]):
                    await asyncio.sleep(0)
                if skips[i]:
                    return  # refused before its effect
                await turns[i].wait()
                done.append(i)
            finally:
                turns[i].release()

        await asyncio.gather(*(request(i) for i in range(len(delays))))
        assert turns[-1].done
        return done

    done = asyncio.run(main())
    assert done == [i for i in range(len(delays)) if not skips[i]]


# ------------------------------------------------------------------ VerificationGuard


@pytest.fixture
def rm(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    manager = ReplicaManager(1, logs)
    manager.apply_partition_state("t", 0, uuid.uuid4(),
                                  PartitionState((1,), (1,), 1, 0, 0), LogConfig())
    yield manager
    manager.io_pool.shutdown(wait=True)
    logs.shutdown()


@pytest.fixture
def leader(rm: ReplicaManager) -> Partition:
    p = rm.get_partition("t", 0)
    assert p is not None
    return p


def _txn_batch(pid: int, epoch: int, seq: int) -> memoryview:
    return memoryview(build_batch([Record(None, b"v%d" % seq)], producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq,
                                  transactional=True))


def test_guard_lets_a_verified_batch_start_its_transaction(leader: Partition) -> None:
    guard = leader.maybe_start_verification(7, 0)
    assert leader.maybe_start_verification(7, 0) is guard  # shared while it stands
    leader.append_as_leader(_txn_batch(7, 0, 0), 1, verification_guard=guard)
    assert leader.has_ongoing_txn(7, 0)
    # Once the transaction is open here, the guard is gone and none is needed.
    assert leader.maybe_start_verification(7, 0) is not guard
    leader.append_as_leader(_txn_batch(7, 0, 1), 1, verification_guard=guard)


def test_a_marker_between_verification_and_append_fails_the_batch(leader: Partition) -> None:
    guard = leader.maybe_start_verification(7, 0)
    leader.append_as_leader(_txn_batch(7, 0, 0), 1, verification_guard=guard)
    guard2 = leader.maybe_start_verification(7, 0)  # a later transaction's first batch...
    leader.append_txn_marker(7, 0, 0, commit=False)  # ...but the transaction ended
    with pytest.raises(InvalidTxnStateError):
        leader.append_as_leader(_txn_batch(7, 0, 1), 1, verification_guard=guard2)
    assert not leader.has_ongoing_txn(7, 0)


def test_a_new_epoch_replaces_the_guard(leader: Partition) -> None:
    old = leader.maybe_start_verification(7, 0)
    new = leader.maybe_start_verification(7, 1)
    assert new is not old
    with pytest.raises(InvalidTxnStateError):
        leader.append_as_leader(_txn_batch(7, 0, 0), 1, verification_guard=old)


# ------------------------------------------------------------------ handle_produce_append


async def _settle(rounds: int = 50) -> None:
    """Let every runnable task run as far as it can (to check what has NOT happened)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def test_a_batch_waiting_on_verification_is_not_overtaken(rm: ReplicaManager) -> None:
    """The issue-21 bug at the partition layer: the first batch of a transaction waits on
    a (remote) coordinator, held there until the test answers; the producer's next batch,
    pipelined on the same connection, must wait for it instead of reaching the log first
    (which storage refuses with OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for librdkafka)."""
    calls: list[Sequence[tuple[str, int]]] = []
    answer = asyncio.Event()

    async def slow_coordinator(txn_id: str, pid: int, epoch: int,
                               tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        calls.append(tps)
        await answer.wait()
        return dict.fromkeys(tps, 0)

    rm.txn_verifier = slow_coordinator

    async def main() -> list[int]:
        first = EffectTurn(None)
        second = EffectTurn(first)
        t1 = asyncio.ensure_future(rm.handle_produce_append(
            [("t", 0, _txn_batch(7, 0, 0))], -1, 5000, "tx", first))
        t2 = asyncio.ensure_future(rm.handle_produce_append(
            [("t", 0, _txn_batch(7, 0, 1))], -1, 5000, "tx", second))
        await _settle()  # both requests run as far as they can while the question is open
        assert len(calls) == 1 and not t1.done() and not t2.done()
        assert rm.get_partition("t", 0).log_end_offset == 0  # type: ignore[union-attr]
        answer.set()
        r1, r2 = await asyncio.gather(t1, t2)
        assert (r1[0].error, r2[0].error) == (0, 0), (r1[0].error_message,
                                                       r2[0].error_message)
        assert r1[0].info is not None and r2[0].info is not None
        return [r1[0].info.base_offset, r2[0].info.base_offset]

    assert asyncio.run(main()) == [0, 1]
    assert len(calls) == 1  # the two requests shared one question to the coordinator


def test_a_later_request_waits_for_an_earlier_one_still_verifying(rm: ReplicaManager) -> None:
    """Effects in arrival order across producers: the connection's first request (a
    transactional batch whose verification is held at the coordinator until the test
    answers) appends before its second (an idempotent batch that needs no verification),
    as Kafka's one-request-at-a-time handling would; without the turn the second lands
    first."""
    answer = asyncio.Event()

    async def slow_coordinator(txn_id: str, pid: int, epoch: int,
                               tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        await answer.wait()
        return dict.fromkeys(tps, 0)

    rm.txn_verifier = slow_coordinator
    idempotent = memoryview(build_batch([Record(None, b"i")], producer_id=8,
                                        producer_epoch=0, base_sequence=0))

    async def main() -> list[int]:
        first = EffectTurn(None)
        second = EffectTurn(first)
        t1 = asyncio.ensure_future(rm.handle_produce_append(
            [("t", 0, _txn_batch(7, 0, 0))], 1, 5000, "tx", first))
        t2 = asyncio.ensure_future(rm.handle_produce_append(
            [("t", 0, idempotent)], 1, 5000, None, second))
        await _settle()  # the second has had every chance to overtake
        assert not t2.done()
        assert rm.get_partition("t", 0).log_end_offset == 0  # type: ignore[union-attr]
        answer.set()
        r1, r2 = await asyncio.gather(t1, t2)
        assert r1[0].info is not None and r2[0].info is not None
        return [r1[0].info.base_offset, r2[0].info.base_offset]

    assert asyncio.run(main()) == [0, 1]


def test_a_refused_verification_fails_only_that_batch(rm: ReplicaManager) -> None:
    async def refusing(txn_id: str, pid: int, epoch: int,
                       tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return dict.fromkeys(tps, int(ErrorCode.invalid_txn_state))

    rm.txn_verifier = refusing
    (r,) = asyncio.run(rm.handle_produce_append([("t", 0, _txn_batch(7, 0, 0))], 1, 5000,
                                                "tx", EffectTurn(None)))
    assert r.error == ErrorCode.invalid_txn_state and r.info is None
    assert rm.get_partition("t", 0).log_end_offset == 0  # type: ignore[union-attr]


def test_transactional_records_need_a_transactional_id(rm: ReplicaManager) -> None:
    (r,) = asyncio.run(rm.handle_produce_append([("t", 0, _txn_batch(7, 0, 0))], 1, 5000))
    assert r.error == ErrorCode.transactional_id_authorization_failed
