"""Leadership across real brokers: controlled shutdown (SIGTERM) moves leaders before a broker
exits, preferred leaders come back after a restart (automatically and with ElectLeaders)
only once the restarted replica is back in the ISR, and a broker whose data dir was wiped
rejoins as an empty follower, never as a leader with nothing.
"""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.test_cluster_metadata import _metadata, _wait

T = 20


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 20000})
    errors: list = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(30) == 0 and not errors, errors[:3]


def _consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_sigterm_moves_leadership_before_exit_last_broker_included(cluster_factory) -> None:
    c = cluster_factory(3)
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("cs", 6, 3, config={"min.insync.replicas": "2"})])["cs"].result(T)
    _produce(c.bootstrap, "cs", [b"a%d" % i for i in range(300)])
    _b, _c, before = _metadata(c[2].bootstrap, "cs")
    t0 = time.monotonic()
    assert c[1].stop(30) == 0
    assert time.monotonic() - t0 < 30
    assert "controlled shutdown: leadership moved away" in c[1].log()
    # Broker 1 no longer leads anything and left every ISR; its partitions have new
    # leaders (the next ISR member) with new epochs: clients were moved, not cut off.
    _b, _c, after = _metadata(c[2].bootstrap, "cs")
    for old, new in zip(before, after, strict=True):
        assert new[1] != 1 and 1 not in new[4]
        if old[1] == 1:
            assert new[2] == old[2] + 1 and new[1] in (2, 3)
    _produce(c[2].bootstrap, "cs", [b"b%d" % i for i in range(100)])  # still acks=all
    # The others stop within the bound too, the last one of the cluster included.
    for n in (2, 3):
        t0 = time.monotonic()
        assert c[n].stop(30) == 0
        assert time.monotonic() - t0 < 30, f"broker {n} took too long"


@pytest.mark.slow
def test_preferred_leader_comes_back_after_restart(cluster_factory) -> None:
    c = cluster_factory(3, **{"leader.imbalance.check.interval.seconds": "1"})
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("pl", 3, 3, config={"min.insync.replicas": "2"})])["pl"].result(T)
    _produce(c.bootstrap, "pl", [b"a%d" % i for i in range(300)])
    _b, _c, before = _metadata(c[2].bootstrap, "pl")
    mine = [p[0] for p in before if p[1] == 1]
    assert mine, before
    c[1].kill()
    _wait(lambda: all(p[1] not in (1, -1) for p in _metadata(c[2].bootstrap, "pl")[2]),
          15, "leaders moved off broker 1")
    _produce(c[2].bootstrap + "," + c[3].bootstrap, "pl", [b"b%d" % i for i in range(300)])
    c[1].start()
    seen: list = []

    def back() -> bool:
        parts = _metadata(c[2].bootstrap, "pl")[2]
        seen.append(parts)
        return all(p[1] == 1 for p in parts if p[0] in mine)

    _wait(back, 40, "broker 1 leading its preferred partitions again")
    # Never led while catching up: whenever broker 1 led one, it was in its ISR.
    for parts in seen:
        for p in parts:
            if p[1] == 1:
                assert 1 in p[4], parts
    got = _consume_all(c.bootstrap, "pl", 3, 600)
    assert sorted(got) == sorted([b"a%d" % i for i in range(300)]
                                 + [b"b%d" % i for i in range(300)])


@pytest.mark.slow
def test_elect_leaders_preferred_with_the_admin_client(cluster_factory) -> None:
    c = cluster_factory(3, **{"auto.leader.rebalance.enable": "false"})
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("el", 3, 3)])["el"].result(T)
    _produce(c.bootstrap, "el", [b"x%d" % i for i in range(100)])
    c[1].kill()
    _wait(lambda: all(p[1] != 1 for p in _metadata(c[2].bootstrap, "el")[2]), 15, "moved")
    c[1].start()
    _wait(lambda: all(1 in p[4] for p in _metadata(c[2].bootstrap, "el")[2]), 40,
          "broker 1 back in every ISR")
    parts = _metadata(c[2].bootstrap, "el")[2]
    target = next(p for p in parts if p[3][0] == 1)
    assert target[1] != 1  # no automatic rebalance
    tp = TopicPartition("el", target[0])
    result = a.elect_leaders(ElectionType.PREFERRED, [tp]).result(T)
    assert result[tp] is None, result
    after = {p[0]: p for p in _metadata(c[3].bootstrap, "el")[2]}[target[0]]
    assert after[1] == 1 and after[2] == target[2] + 1
    # Already preferred: ELECTION_NOT_NEEDED.
    again = a.elect_leaders(ElectionType.PREFERRED, [tp]).result(T)
    assert again[tp] is not None and again[tp].name() == "ELECTION_NOT_NEEDED"


@pytest.mark.slow
def test_wiped_data_dir_rejoins_as_an_empty_follower(cluster_factory) -> None:
    c = cluster_factory(3, **{"auto.leader.rebalance.enable": "false"})
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    # "solo" has broker 1 as its only replica left in the ISR when broker 1 dies.
    a.create_topics([NewTopic("wipe", 3, 3), NewTopic("solo", 2,
                                                      replica_assignment=[[1, 2], [1, 2]])])
    _wait(lambda: a.list_topics(timeout=5).topics.get("solo") is not None, 10, "solo")
    _produce(c.bootstrap, "wipe", [b"w%d" % i for i in range(300)])
    _produce(c.bootstrap, "solo", [b"s%d" % i for i in range(100)])
    c[2].kill()  # solo's ISR shrinks to [1]
    _wait(lambda: all(p[4] == (1,) for p in _metadata(c[1].bootstrap, "solo")[2]), 15,
          "solo ISR [1]")
    c[1].kill()
    shutil.rmtree(c[1].data_dir)
    c[1].data_dir.mkdir()
    c[1].start()
    c[2].start()
    c.wait_registered()
    # A window for the controller to act on both registrations; what it must not do (elect
    # a leader for solo) leaves nothing to poll for.
    time.sleep(3)
    # solo: broker 1 holds nothing and broker 2 was not in the ISR: no leader (offline)
    # rather than a leader with nothing.
    for p in _metadata(c[3].bootstrap, "solo")[2]:
        assert p[1] == -1, p
    # wipe: broker 1 came back empty; it follows and catches up, and is in the ISR again
    # only once it has everything (then its log matches the leader's).
    _wait(lambda: all(1 in p[4] for p in _metadata(c[3].bootstrap, "wipe")[2]), 40,
          "broker 1 back in the ISR of wipe")
    for p in _metadata(c[3].bootstrap, "wipe")[2]:
        f1 = c[1].data_dir / f"wipe-{p[0]}" / "00000000000000000000.log"
        leader_log = c[p[1]].data_dir / f"wipe-{p[0]}" / "00000000000000000000.log"
        assert f1.read_bytes() == leader_log.read_bytes()
