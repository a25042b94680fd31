"""`yak cluster decommission` (issue 23) on a real three-broker cluster on etcd: a topic with
replication factor 2 and 4 partitions is drained off broker 3 while its records stay
readable; `--status` counts down to none; the refusals are one line with exit 2 (a topic
whose replication factor the other brokers cannot hold, a broker that is not there)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.test_cli import ok, one_line_error, yak
from tests.cli.test_partitions_cli import T, consume_all, moving, produce_acked, replicas_of
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 - fixtures
from tests.waiting import wait_until
from yak.cluster.placement import drain_plan


def status(via: list[str]) -> dict:
    return json.loads(ok("cluster", "decommission", "3", "--status", "--json", *via))


@pytest.mark.slow
def test_decommission_drains_a_broker_and_loses_nothing(cluster_factory) -> None:  # noqa: F811
    c = cluster_factory(3)
    via = ["--bootstrap", c[1].bootstrap]
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    # Broker 3 holds a replica of every partition, the leader of two.
    layout = [[3, 1], [2, 3], [3, 2], [1, 3]]
    admin.create_topics([NewTopic("dc", 4, replica_assignment=layout)])["dc"].result(T)
    acked = produce_acked(c[1].bootstrap, "dc", 4, 150)
    assert len(acked) == 600

    # A topic with three replicas cannot live on two brokers: refused, nothing submitted.
    admin.create_topics([NewTopic("wide", 1, replica_assignment=[[1, 2, 3]])])["wide"].result(T)
    r = yak("cluster", "decommission", "3", *via)
    one_line_error(r, "cannot decommission broker 3", "wide/0 has 3 replicas",
                   "only 2 broker(s) other than 3 remain")
    assert r.returncode == 2
    assert moving(via) == []
    admin.delete_topics(["wide"])["wide"].result(T)
    wait_until(lambda: "wide" not in admin.list_topics(timeout=T).topics, T, "wide deleted")

    r = yak("cluster", "decommission", "9", *via)
    one_line_error(r, "broker 9 is not in the cluster and holds no replicas",
                   "brokers: 1, 2, 3")
    assert r.returncode == 2

    assert status(via) == {"broker": 3, "remaining": 4, "moving": 0,
                           "partitions": ["dc/0", "dc/1", "dc/2", "dc/3"]}
    out = ok("cluster", "decommission", "3", *via)
    # The plan is placement's: each replica on 3 to the least-loaded other broker.
    plan = drain_plan({p: r for p, r in enumerate(layout)}, 3, {1: None, 2: None, 3: None})
    for p, target in plan.items():
        assert f"dc/{p}: moving to replicas {','.join(map(str, target))}" in out
    assert "4 partition(s) moving off it" in out

    wait_until(lambda: status(via)["remaining"] == 0, 60, "no partition on broker 3")
    assert "broker 3 holds no replicas: it can be stopped" in ok(
        "cluster", "decommission", "3", "--status", *via)
    got = replicas_of(c[1].bootstrap, "dc")
    assert got == plan and all(3 not in r and len(r) == 2 for r in got.values()), got
    wait_until(lambda: not any(c[3].data_dir.glob("dc-*")), T, "broker 3's copies deleted")
    # Again: nothing left to move.
    assert "no partition is to be moved; it holds no replicas" in ok(
        "cluster", "decommission", "3", *via)
    # Every acknowledged record is readable with broker 3 gone.
    c[3].stop()
    assert consume_all(c[1].bootstrap, "dc", 4, len(acked)) == acked


def test_drain_plan_takes_the_least_loaded_broker_and_spreads_racks() -> None:
    """The plan alone (no broker): load counts the plan's own choices, a rack the other
    replicas lack wins over a lighter broker, ties go to the lower id, and a partition the
    others cannot hold is refused."""
    import pytest

    from yak.errors import InvalidReplicationFactorError

    parts = {"a/0": [3, 1], "a/1": [3, 2], "a/2": [1, 2], "a/3": [2, 3]}
    # Loads before: 1 -> 2, 2 -> 3, 4 -> 0. a/0 takes 4 (0); a/1 takes 4 again (now 1,
    # against 1's 2); a/3 finds 1 and 4 both at 2 and takes the lower id, 1.
    plan = drain_plan(parts, 3, {1: None, 2: None, 3: None, 4: None})
    assert plan == {"a/0": [4, 1], "a/1": [4, 2], "a/3": [2, 1]}
    # Racks: broker 1 is in rack x with broker 2; 4 (rack y, loaded) beats 5 (rack x, idle)
    # for a partition whose staying replica is 2 (rack x).
    racks = {1: "x", 2: "x", 3: "y", 4: "y", 5: "x"}
    assert drain_plan({"b/0": [3, 2], "b/1": [4, 1]}, 3, racks) == {"b/0": [4, 2]}
    assert drain_plan({"c/0": [3, 4]}, 3, racks) == {"c/0": [1, 4]}  # rack x, lowest id
    with pytest.raises(InvalidReplicationFactorError, match="c/0 has 3 replicas"):
        drain_plan({"c/0": [1, 2, 3]}, 3, {1: None, 2: None, 3: None})
