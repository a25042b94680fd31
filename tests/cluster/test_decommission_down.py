"""`yak cluster decommission` while another broker is down (issue 23), on four real
brokers and etcd, and `placement.drain` on its own.

The plan uses only live, uncordoned brokers. A partition that also has a replica on the
down broker, or that finds no live, uncordoned broker outside its replicas, is listed
with the reason and not submitted (before, the whole plan named the down broker and the
reassignment refused it with INVALID_REPLICA_ASSIGNMENT); `--wait` retries them until the
down broker is back, and every acknowledged record is read after the drain. A broker that
is down and holds a partition's only in-sync copy is refused (exit 2).
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.test_cli import ok, one_line_error, yak
from tests.cli.test_decommission_cli import status
from tests.cli.test_partitions_cli import T, consume_all, produce_acked, replicas_of
from tests.cluster.conftest import (  # noqa: F401 - fixtures
    cluster_factory,
    etcd,
    keys,
    metadata_brokers,
)
from tests.waiting import wait_until
from yak.cluster.placement import drain
from yak.errors import InvalidReplicationFactorError


def test_drain_defers_what_cannot_move_now() -> None:
    brokers = {1: None, 2: None, 3: None, 4: None}
    parts = {"a/0": [3, 1], "a/1": [3, 4], "a/2": [2, 3], "a/3": [1, 2]}
    # Broker 4 down, broker 2 cordoned: only broker 1 takes replicas.
    d = drain(parts, 3, brokers, live={1, 2, 3}, cordoned={2})
    assert d.moves == {"a/2": [2, 1]}
    assert d.deferred == {
        "a/0": "no live, uncordoned broker outside its replicas 3,1",
        "a/1": "its replica on broker 4 is down (a target naming it would be refused)"}
    assert all(4 not in r and 2 not in set(r) - set(parts[k]) for k, r in d.moves.items())
    # Everyone up again: everything moves, and the plan is drain_plan's.
    assert not drain(parts, 3, brokers).deferred
    # The leaving broker itself down: its replicas still move (the others hold copies).
    assert drain({"b/0": [3, 1]}, 3, brokers, live={1, 2}).moves == {"b/0": [2, 1]}
    # A partition the cluster could never hold, down brokers counted: refused.
    with pytest.raises(InvalidReplicationFactorError, match="c/0 has 4 replicas"):
        drain({"c/0": [1, 2, 3, 4]}, 3, brokers, live={1, 2, 3})


def _gone(c, node: int) -> bool:
    return node not in metadata_brokers(c[1].bootstrap)


@pytest.mark.slow
def test_decommission_with_a_broker_down(cluster_factory) -> None:  # noqa: F811
    c = cluster_factory(4, partition_autobalancing_mode="off")
    via = ["--bootstrap", c[1].bootstrap]
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    layout = [[3, 1], [3, 4], [2, 3], [1, 2]]
    admin.create_topics([NewTopic("dd", 4, replica_assignment=layout)])["dd"].result(T)
    acked = produce_acked(c[1].bootstrap, "dd", 4, 100)
    assert len(acked) == 400

    c[4].stop(30)
    wait_until(lambda: _gone(c, 4), T, "broker 4 unregistered")
    ok("config", "set", "--broker", "2", "cordoned.log.dirs=*", *via)
    out = ok("cluster", "decommission", "3", *via)
    assert "dd/2: moving to replicas 2,1" in out, out
    assert "dd/0: not moved yet: no live, uncordoned broker outside its replicas 3,1" in out
    assert "dd/1: not moved yet: its replica on broker 4 is down" in out, out
    assert "broker 3: 1 partition(s) moving off it, 2 not movable yet" in out, out
    assert "INVALID_REPLICA_ASSIGNMENT" not in out
    wait_until(lambda: status(via)["remaining"] == 2, 60, "dd/2 moved off broker 3")

    # Broker 2 uncordoned, broker 4 started while --wait retries: the rest moves.
    ok("config", "delete", "--broker", "2", "cordoned.log.dirs", *via)
    starter = threading.Timer(3.0, c[4].start)
    starter.start()
    try:
        out = ok("cluster", "decommission", "3", "--wait", "90", *via)
    finally:
        starter.join()
    assert "dd/0: moving to replicas" in out and "dd/1: moving to replicas" in out, out
    assert "not movable yet" not in out, out
    wait_until(lambda: status(via)["remaining"] == 0, 90, "no partition on broker 3")
    got = replicas_of(c[1].bootstrap, "dd")
    assert all(3 not in r and len(r) == 2 for r in got.values()), got
    assert got[1][1] == 4  # dd/1 kept its replica on broker 4
    assert consume_all(c[1].bootstrap, "dd", 4, len(acked)) == acked

    # Recommissioned, then given the only copy of a partition and stopped: refused.
    ok("cluster", "decommission", "3", "--cancel", *via)
    admin.create_topics([NewTopic("solo", 1, replica_assignment=[[3]])])["solo"].result(T)
    assert len(produce_acked(c[1].bootstrap, "solo", 1, 10)) == 10
    c[3].stop(30)
    wait_until(lambda: _gone(c, 3), T, "broker 3 unregistered")
    r = yak("cluster", "decommission", "3", *via)
    one_line_error(r, "cannot decommission broker 3", "it is down and holds the only",
                   "in-sync copy of solo/0")
    assert r.returncode == 2
