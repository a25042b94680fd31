"""The controller's decisions as pure functions: leader election, ISR clean-up, wiped data
dirs, controlled shutdown, ElectLeaders, preferred-leader imbalance, replica placement.

These are the rules of yak/cluster/quorum_controller.py and placement.py, checked case by
case on records and broker registrations (plain data: no etcd needed to decide); the
cluster tests check that real brokers act on them.
"""

from __future__ import annotations

import random

import pytest

from yak.cluster.etcd_store import BrokerInfo
from yak.cluster.placement import assign_replicas
from yak.cluster.quorum_controller import PREFERRED, UNCLEAN, elect, reconcile
from yak.cluster.records import LEADER_RECOVERING, PartitionRecord, RegisterBrokerRecord
from yak.errors import ErrorCode, InvalidReplicationFactorError

REV = 100  # the record's mod_revision in these cases


def brokers(*ids: int, epoch: int = 10, shutting: tuple[int, ...] = (),
            dirs: dict[int, str] | None = None) -> dict[int, BrokerInfo]:
    return {i: BrokerInfo(i, epoch, RegisterBrokerRecord(
        i, f"inc-{i}", in_controlled_shutdown=i in shutting,
        log_dirs=((dirs or {}).get(i, f"dir-{i}"),))) for i in ids}


def record(leader: int = 1, isr: tuple[int, ...] = (1, 2, 3), replicas=(1, 2, 3),
           leader_epoch: int = 5, partition_epoch: int = 9,
           directories: tuple[str, ...] = ()) -> PartitionRecord:
    return PartitionRecord("t", 0, tuple(replicas), tuple(isr), leader, leader_epoch,
                           partition_epoch, directories=directories)


def test_nothing_to_do_when_everyone_is_up() -> None:
    assert reconcile(record(), REV, brokers(1, 2, 3)) is None


def test_dead_leader_replaced_by_next_isr_member_in_replica_order() -> None:
    new = reconcile(record(leader=1, replicas=(1, 3, 2)), REV, brokers(2, 3))
    assert new is not None
    assert (new.leader, new.isr) == (3, (2, 3))
    assert (new.leader_epoch, new.partition_epoch) == (6, 10)


def test_dead_follower_leaves_isr_without_leader_change() -> None:
    new = reconcile(record(), REV, brokers(1, 2))
    assert new is not None
    assert (new.leader, new.isr, new.leader_epoch, new.partition_epoch) == (1, (1, 2), 5, 10)


def test_isr_never_emptied_and_last_leader_kept() -> None:
    new = reconcile(record(leader=2, isr=(1, 2)), REV, brokers(3))
    assert new is not None
    assert new.isr == (2,) and new.leader == -1 and new.leader_epoch == 6
    # Offline with the last ISR member dead: nothing more to write.
    assert reconcile(new, REV + 1, brokers(3)) is None
    # It comes back (registered after the record): it leads again, with a new epoch.
    back = reconcile(new, REV + 1, brokers(2, 3, epoch=REV + 5))
    assert back is not None and back.leader == 2 and back.leader_epoch == 7


def test_not_in_isr_is_never_elected_without_unclean() -> None:
    offline = record(leader=-1, isr=(1,))
    assert reconcile(offline, REV, brokers(2, 3)) is None
    unclean = reconcile(offline, REV, brokers(2, 3), unclean=True)
    assert unclean is not None
    assert (unclean.leader, unclean.isr) == (2, (2,))
    assert unclean.leader_recovery_state == LEADER_RECOVERING


def test_leader_that_registered_again_is_re_elected_with_a_new_epoch() -> None:
    bs = brokers(1, 2, 3)
    bs[1] = BrokerInfo(1, REV + 10, bs[1].record)  # re-registered after the record
    new = reconcile(record(), REV, bs)
    assert new is not None
    # Out of the ISR (it must catch up again), so the next ISR member leads.
    assert (new.leader, new.isr, new.leader_epoch) == (2, (2, 3), 6)


def test_controlled_shutdown_moves_leadership_and_isr() -> None:
    new = reconcile(record(), REV, brokers(1, 2, 3, shutting=(1,)))
    assert new is not None and (new.leader, new.isr) == (2, (2, 3))
    # The last broker of a cluster shutting down: no one else, the partition goes offline
    # with the broker still in the ISR (it is the one that has everything).
    last = reconcile(record(isr=(1,), replicas=(1,)), REV, brokers(1, shutting=(1,)))
    assert last is not None and (last.leader, last.isr) == (-1, (1,))


def test_wiped_data_dir_leaves_isr_even_as_last_member() -> None:
    rec = record(leader=-1, isr=(1,), directories=("dir-1", "dir-2", "dir-3"))
    new = reconcile(rec, REV, brokers(1, 2, 3, dirs={1: "new-dir"}, epoch=REV + 1))
    assert new is not None
    assert new.isr == () and new.leader == -1
    assert new.directories == ("new-dir", "dir-2", "dir-3")
    # With unclean election it is still not the one chosen: it holds nothing.
    unclean = reconcile(rec, REV, brokers(1, 2, 3, dirs={1: "new-dir"}), unclean=True)
    assert unclean is not None and unclean.leader == 2


def test_elect_preferred() -> None:
    rec = record(leader=2, isr=(1, 2, 3))
    got = elect(rec, REV, brokers(1, 2, 3), PREFERRED)
    assert got.error is ErrorCode.none and got.record is not None
    assert (got.record.leader, got.record.leader_epoch) == (1, 6)
    assert elect(record(leader=1), REV, brokers(1, 2, 3), PREFERRED).error is \
        ErrorCode.election_not_needed
    # A preferred replica still catching up (not in the ISR) is not elected.
    catching_up = record(leader=2, isr=(2, 3))
    assert elect(catching_up, REV, brokers(1, 2, 3), PREFERRED).error is \
        ErrorCode.preferred_leader_not_available


def test_elect_unclean() -> None:
    assert elect(record(), REV, brokers(1, 2, 3), UNCLEAN).error is \
        ErrorCode.election_not_needed
    got = elect(record(leader=-1, isr=(1,)), REV, brokers(2, 3), UNCLEAN)
    assert got.error is ErrorCode.none and got.record is not None and got.record.leader == 2
    assert elect(record(leader=-1, isr=(1,)), REV, brokers(4), UNCLEAN).error is \
        ErrorCode.eligible_leaders_not_available


def test_placement_is_kafkas_round_robin() -> None:
    # Kafka's AdminTest.testReplicaAssignment (5 brokers, 10 partitions, RF 3, start 0).
    got = assign_replicas(10, 3, [0, 1, 2, 3, 4], fixed_start_index=0)
    assert got == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
                   [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(1, 4, [1, 2, 3])


def test_rack_aware_placement_spreads_racks() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    for seed in range(20):
        for replicas in assign_replicas(12, 3, racks, rng=random.Random(seed)):
            assert len({racks[b] for b in replicas}) == 3
            assert len(set(replicas)) == 3
    leaders = [r[0] for r in assign_replicas(6, 2, racks, fixed_start_index=0)]
    assert sorted(leaders) == [0, 1, 2, 3, 4, 5]
