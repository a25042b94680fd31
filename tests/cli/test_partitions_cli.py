"""`yak partitions move|move-status|move-cancel` (partition reassignment, issue 23) against a
real two-broker cluster on etcd: a move held pending (its target paused) is listed with its
adding and removing replicas, in a table and as JSON, and cancelled; bad input is the
broker's error in one line with exit 2; two moves at once complete and every record a
librdkafka producer had acknowledged (acks=all) is then read from the new replicas; with
broker 2 down, `yak cluster decommission 2` is refused: it holds mv/1's only copy."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.test_cli import ok, one_line_error, yak
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 - fixtures
from tests.waiting import wait_until

T = 30  # seconds: generous for a shared machine


def produce_acked(bootstrap: str, topic: str, partitions: int, n: int) -> set[bytes]:
    """n values per partition with acks=all; the set the broker acknowledged."""
    acked: set[bytes] = set()
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})

    def done(err: object, msg: object) -> None:
        if err is None:
            acked.add(msg.value())  # type: ignore[attr-defined]

    for part in range(partitions):
        for i in range(n):
            p.produce(topic, f"{topic}-{part}-{i}".encode(), partition=part, on_delivery=done)
    assert p.flush(T) == 0
    return acked


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> set[bytes]:
    """Every value of the topic, read by assignment (no group, no offsets topic)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: set[bytes] = set()
    deadline = time.monotonic() + T
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.add(m.value())
    finally:
        c.close()
    return got


def replicas_of(bootstrap: str, topic: str) -> dict[int, list[int]]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=T)
    return {p: list(pm.replicas) for p, pm in md.topics[topic].partitions.items()}


def moving(via: list[str]) -> list[dict]:
    return json.loads(ok("partitions", "move-status", "--json", *via))["reassignments"]


@pytest.mark.slow
def test_move_status_cancel_and_errors_on_two_brokers(cluster_factory) -> None:  # noqa: F811
    # A session long enough that broker 2, paused so that it cannot catch up, stays
    # registered while its move is listed and cancelled.
    c = cluster_factory(2, **{"broker.session.timeout.ms": "15000"})
    via = ["--bootstrap", c[1].bootstrap]
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    admin.create_topics([NewTopic("mv", 2, replica_assignment=[[1], [1]])])["mv"].result(T)
    acked = produce_acked(c[1].bootstrap, "mv", 2, 200)
    assert len(acked) == 400

    os.kill(c[2].pid, signal.SIGSTOP)
    try:
        assert ok("partitions", "move", "mv/0", "--replicas", "2", *via).strip() == \
            "mv/0: moving to replicas 2"
        assert moving(via) == [{"topic": "mv", "partition": 0, "replicas": [2, 1],
                                "target": [2], "adding": [2], "removing": [1]}]
        table = ok("partitions", "move-status", *via).splitlines()
        assert table[0].split() == ["PARTITION", "REPLICAS", "ADDING", "REMOVING"]
        assert table[1].split() == ["mv/0", "2,1", "2", "1"]
        # Bad input: the broker's own error, one line, exit 2.
        for args, fragment in [
            (["move", "mv/0", "--replicas", "1,1"], "mv/0: INVALID_REPLICA_ASSIGNMENT"),
            (["move", "mv/1", "--replicas", "9"], "mv/1: INVALID_REPLICA_ASSIGNMENT"),
            (["move", "nope/0", "--replicas", "1"], "nope/0: UNKNOWN_TOPIC_OR_PARTITION"),
            (["move-cancel", "mv/1"], "mv/1: NO_REASSIGNMENT_IN_PROGRESS"),
            (["move", "mv", "--replicas", "1"], "expected TOPIC/PARTITION"),
            (["move", "mv/1", "--replicas", "a,b"], "invalid replicas"),
            (["move", "mv/1"], "no target replicas"),
        ]:
            r = yak("partitions", *args, *via)
            one_line_error(r, fragment)
            assert r.returncode == 2, (args, r.stderr)
        assert ok("partitions", "move-cancel", "mv/0", *via).strip() == "mv/0: move cancelled"
        assert moving(via) == []
        assert "no partition is being moved" in ok("partitions", "move-status", *via)
        assert replicas_of(c[1].bootstrap, "mv")[0] == [1]
    finally:
        os.kill(c[2].pid, signal.SIGCONT)

    # Of two partitions one accepted, one refused: the accepted is printed, exit 2.
    r = yak("partitions", "move", "mv/1:1,2", "mv/5:1", *via)
    assert r.stdout.strip() == "mv/1: moving to replicas 1,2", r.stderr
    one_line_error(r, "cannot move: mv/5: UNKNOWN_TOPIC_OR_PARTITION")
    assert r.returncode == 2

    # Two moves at once, each with its own target: mv/0 grows to both brokers, mv/1 (if
    # still moving, its target replaced) moves to broker 2 alone, its leader removed.
    out = ok("partitions", "move", "mv/0:1,2", "mv/1:2", *via).splitlines()
    assert out == ["mv/0: moving to replicas 1,2", "mv/1: moving to replicas 2"]
    wait_until(lambda: moving(via) == [], T, "both moves complete")
    wait_until(lambda: replicas_of(c[2].bootstrap, "mv") == {0: [1, 2], 1: [2]}, T,
               "Metadata shows the targets")
    wait_until(lambda: not (c[1].data_dir / "mv-1").exists(), T, "broker 1's mv-1 deleted")
    assert consume_all(c[2].bootstrap, "mv", 2, len(acked)) == acked

    # Decommissioning broker 2 once it is down is refused: it holds mv/1's only in-sync
    # copy (the check before the replication factor's: mv/0 could not fit either).
    c[2].stop()
    wait_until(lambda: 2 not in {b.id for b in AdminClient(
        {"bootstrap.servers": c[1].bootstrap}).list_topics(timeout=T).brokers.values()},
        T, "broker 2 unregistered")
    r = yak("cluster", "decommission", "2", *via)
    one_line_error(r, "cannot decommission broker 2: it is down and holds the only in-sync"
                   " copy of mv/1; start it again first")
    assert r.returncode == 2
