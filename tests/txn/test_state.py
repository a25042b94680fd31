"""The transaction state machine on its own: Kafka's table of legal moves, and the
checks `complete_transition` makes before it applies a transition read from the log."""

from __future__ import annotations

import itertools

import pytest

from yak.errors import ErrorCode
from yak.txn.state import (
    IllegalStateTransition,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
    valid_previous_states,
)

S = TransactionState

# Transcribed from Kafka's TransactionMetadata.scala (validPreviousStates), classic protocol.
KAFKA_TABLE = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def meta(
    state: S, epoch: int = 3, partitions: set[tuple[str, int]] | None = None
) -> TransactionMetadata:
    return TransactionMetadata(
        "t",
        100,
        producer_epoch=epoch,
        txn_timeout_ms=1000,
        state=state,
        partitions=set(partitions or ()),
        txn_start_timestamp=10,
        txn_last_update_timestamp=20,
    )


def test_ids_and_names_are_kafkas() -> None:
    assert [(s.value, s.label) for s in S] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    assert S.from_label("PrepareCommit") is S.PREPARE_COMMIT and S.from_label("nope") is None


@pytest.mark.parametrize("source,target", list(itertools.product(S, S)))
def test_every_transition_follows_the_table(source: S, target: S) -> None:
    assert valid_previous_states(target) == KAFKA_TABLE[target]
    m = meta(source)
    if source in KAFKA_TABLE[target]:
        t = m._prepare(target, 100, 3, -1, 1000, frozenset(), 10, 30)
        assert t.state is target and m.pending_state is target
    else:
        with pytest.raises(IllegalStateTransition):
            m._prepare(target, 100, 3, -1, 1000, frozenset(), 10, 30)
        assert m.pending_state is None  # a refused move leaves nothing behind


def test_a_pending_transition_blocks_a_second_one() -> None:
    m = meta(S.ONGOING, partitions={("a", 0)})
    m.prepare_abort_or_commit(True, 50)
    with pytest.raises(IllegalStateTransition):
        m.prepare_abort_or_commit(False, 51)
    m.abort_transition()
    assert m.pending_state is None and m.state is S.ONGOING


def test_commit_path_applies_only_what_was_prepared() -> None:
    m = meta(S.EMPTY)
    add = m.prepare_add_partitions(frozenset({("a", 0)}), 100)
    assert add.txn_start_timestamp == 100  # a new transaction starts now
    m.complete_transition(add)
    assert m.state is S.ONGOING and m.partitions == {("a", 0)}
    more = m.prepare_add_partitions(frozenset({("b", 1)}), 150)
    assert more.txn_start_timestamp == 100  # same transaction, same start
    m.complete_transition(more)
    prep = m.prepare_abort_or_commit(True, 200)
    m.complete_transition(prep)
    assert m.state is S.PREPARE_COMMIT
    done = m.prepare_complete(300)
    with pytest.raises(IllegalStateTransition):
        m.complete_transition(prep)  # not the pending transition
    m.remove_partition(("a", 0))
    m.remove_partition(("b", 1))
    m.complete_transition(done)
    assert m.state is S.COMPLETE_COMMIT and not m.partitions
    assert m.txn_last_update_timestamp == 300 and m.pending_state is None
    with pytest.raises(IllegalStateTransition):
        m.remove_partition(("a", 0))  # markers only while completing


def test_fence_bumps_the_epoch_and_aborts() -> None:
    m = meta(S.ONGOING, epoch=5, partitions={("a", 0)})
    fence = m.prepare_fence_epoch()
    assert fence.state is S.PREPARE_EPOCH_FENCE and fence.producer_epoch == 6
    abort = m.prepare_fenced_abort(fence, 99)
    assert abort.state is S.PREPARE_ABORT and abort.producer_epoch == 6
    assert abort.last_producer_epoch == -1
    m.complete_transition(abort)
    assert m.state is S.PREPARE_ABORT and m.producer_epoch == 6
    with pytest.raises(IllegalStateTransition):
        meta(S.ONGOING, epoch=32767).prepare_fence_epoch()


def test_increment_epoch_kip360_rules() -> None:
    m = meta(S.COMPLETE_COMMIT, epoch=4)
    m.last_producer_epoch = 2
    t = m.prepare_increment_epoch(500, None, 1)
    assert (t.producer_epoch, t.last_producer_epoch, t.txn_timeout_ms) == (5, -1, 500)
    m.abort_transition()
    t = m.prepare_increment_epoch(500, 4, 1)  # the producer's own epoch: bump
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)
    m.abort_transition()
    t = m.prepare_increment_epoch(500, 2, 1)  # the previous epoch: a retried bump
    assert (t.producer_epoch, t.last_producer_epoch) == (4, 2)
    m.abort_transition()
    assert m.prepare_increment_epoch(500, 1, 1) is ErrorCode.producer_fenced
    assert m.pending_state is None


def test_completion_refuses_inconsistent_targets() -> None:
    m = meta(S.ONGOING, partitions={("a", 0)})
    t = m.prepare_abort_or_commit(True, 5)
    m.partitions.add(("z", 9))  # partitions changed under the pending write
    with pytest.raises(IllegalStateTransition):
        m.complete_transition(t)
    m2 = meta(S.EMPTY, epoch=3)
    t2 = m2.prepare_increment_epoch(100, None, 1)
    m2.producer_epoch = 7  # another writer won: the bump no longer follows
    with pytest.raises(IllegalStateTransition):
        m2.complete_transition(t2)
    m3 = meta(S.EMPTY)
    dead = m3.prepare_dead()
    with pytest.raises(IllegalStateTransition):
        m3.complete_transition(dead)  # Dead is removed from the cache, never applied


def test_exhaustion_threshold() -> None:
    assert not is_epoch_exhausted(32765)
    assert is_epoch_exhausted(32766) and is_epoch_exhausted(32767)
