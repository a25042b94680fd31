"""Consumer groups with real clients against a real broker subprocess.

kafka-python, aiokafka and confluent-kafka each speak different versions of the
group APIs (JoinGroup 5-7, OffsetCommit 3-9, OffsetFetch 3-9), so each is driven
through a full join -> consume -> commit -> resume cycle.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(120)

FAST = {"group.initial.rebalance.delay.ms": "0"}


def _topic(bootstrap: str, name: str, partitions: int, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        p.produce(name, f"{name}-{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def _drain(consumers: list[Consumer], want: int, timeout: float = 30.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for c in consumers:
            m = c.poll(0.1)
            if m is not None and not m.error():
                got.append(m.value())
    return got


def _poll_until(
    consumers: list[Consumer], cond: Callable[[], bool], timeout: float, what: str
) -> None:
    """Keep every consumer polling (that is what drives librdkafka's rebalances)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        if cond():
            return
    raise AssertionError(f"timed out waiting for {what}")


def test_two_groups_each_get_everything(broker_factory) -> None:
    b = broker_factory(**FAST)
    _topic(b.bootstrap, "shared", 4, 200)
    g1 = [_consumer(b.bootstrap, "g1") for _ in range(2)]
    g2 = [_consumer(b.bootstrap, "g2")]
    for c in g1 + g2:
        c.subscribe(["shared"])
    everything = {f"shared-{i}".encode() for i in range(200)}
    try:
        # Nothing is committed, so when g1's second member arrives after the first has
        # started, the partitions it takes over are read again from the start: compare
        # sets (at-least-once), not lists.
        got1: set[bytes] = set()
        got2: set[bytes] = set()
        deadline = time.monotonic() + 30
        while (got1 != everything or got2 != everything) and time.monotonic() < deadline:
            got1.update(_drain(g1, 50, timeout=0.5))
            got2.update(_drain(g2, 50, timeout=0.5))
        assert got1 == everything
        assert got2 == everything
        assert all(c.assignment() for c in g1), "both members of g1 got partitions"
    finally:
        for c in g1 + g2:
            c.close()


def test_kafka_python_group_commits_and_resumes(broker_factory) -> None:
    from kafka import KafkaConsumer

    b = broker_factory(**FAST)
    _topic(b.bootstrap, "kp", 3, 90)

    def consumer() -> KafkaConsumer:
        return KafkaConsumer(
            "kp",
            bootstrap_servers=b.bootstrap,
            group_id="kp-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=3000,
        )

    c = consumer()
    seen = []
    for msg in c:
        seen.append(msg.value)
        if len(seen) == 60:
            break
    c.commit()
    c.close()
    assert len(seen) == 60
    c2 = consumer()
    rest = [m.value for m in c2]
    c2.close()
    # Committed positions are per partition: together the two runs read each message
    # exactly once when the first committed exactly what it had consumed.
    assert sorted(seen + rest) == sorted(f"kp-{i}".encode() for i in range(90))


def test_aiokafka_group_commits_and_resumes(broker_factory) -> None:
    from aiokafka import AIOKafkaConsumer

    b = broker_factory(**FAST)
    _topic(b.bootstrap, "aio", 2, 50)

    async def run(limit: int) -> list[bytes]:
        c = AIOKafkaConsumer(
            "aio",
            bootstrap_servers=b.bootstrap,
            group_id="aio-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        got: list[bytes] = []
        try:
            while len(got) < limit:
                batch = await c.getmany(timeout_ms=3000)
                if not batch:
                    break
                for msgs in batch.values():
                    got += [m.value for m in msgs]
            await c.commit()
        finally:
            await c.stop()
        return got

    first = asyncio.run(run(50))
    assert sorted(first) == sorted(f"aio-{i}".encode() for i in range(50))
    assert asyncio.run(run(1)) == []  # everything was committed


def test_static_member_restart_causes_no_rebalance(broker_factory) -> None:
    b = broker_factory(**FAST)
    _topic(b.bootstrap, "static", 4, 40)
    assigns: list[list[int]] = []

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        assigns.append(sorted(p.partition for p in parts))

    other = _consumer(b.bootstrap, "sg", **{"group.instance.id": "other"})
    other.subscribe(["static"], on_assign=on_assign)
    pod = _consumer(b.bootstrap, "sg", **{"group.instance.id": "pod-0"})
    pod.subscribe(["static"])
    _drain([other, pod], 40)
    _poll_until(
        [other, pod],
        lambda: len(pod.assignment()) == 2 and len(other.assignment()) == 2,
        20,
        "a 2/2 split",
    )
    rebalances = len(assigns)
    pod_parts = sorted(p.partition for p in pod.assignment())
    pod.close()  # a static member does not send LeaveGroup
    pod = _consumer(b.bootstrap, "sg", **{"group.instance.id": "pod-0"})
    pod.subscribe(["static"])
    _poll_until([other, pod], lambda: bool(pod.assignment()), 15, "the pod's partitions")
    t_end = time.monotonic() + 3  # give a rebalance, if any, the time to show
    while time.monotonic() < t_end:
        other.poll(0.1)
        pod.poll(0.1)
    assert sorted(p.partition for p in pod.assignment()) == pod_parts
    assert len(assigns) == rebalances, "the other member saw a rebalance"
    pod.close()
    other.close()


def test_cooperative_sticky_rebalance_moves_only_some_partitions(broker_factory) -> None:
    b = broker_factory(**FAST)
    _topic(b.bootstrap, "coop", 6, 60)
    events: list[tuple[str, list[int]]] = []

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        events.append(("assign", sorted(p.partition for p in parts)))

    def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
        events.append(("revoke", sorted(p.partition for p in parts)))

    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    first = _consumer(b.bootstrap, "cg", **coop)
    first.subscribe(["coop"], on_assign=on_assign, on_revoke=on_revoke)
    _drain([first], 60)
    assert {p.partition for p in first.assignment()} == set(range(6))
    second = _consumer(b.bootstrap, "cg", **coop)
    second.subscribe(["coop"])
    _poll_until(
        [first, second],
        lambda: len(first.assignment()) == 3 and len(second.assignment()) == 3,
        30,
        "a 3/3 split",
    )
    revokes = [parts for kind, parts in events if kind == "revoke"]
    # Incremental: the first member gave up exactly the 3 partitions that moved.
    assert revokes and all(len(r) == 3 for r in revokes)
    assert {p.partition for p in first.assignment()} | {
        p.partition for p in second.assignment()
    } == set(range(6))
    second.close()
    first.close()


def test_admin_client_lists_describes_and_alters_group_offsets(broker_factory) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    b = broker_factory(**FAST)
    _topic(b.bootstrap, "adm", 2, 20)
    c = _consumer(b.bootstrap, "adm-group", **{"client.id": "adm-client"})
    c.subscribe(["adm"])
    assert len(_drain([c], 20)) == 20
    c.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})

    listed = admin.list_consumer_groups().result(10)
    assert "adm-group" in {g.group_id for g in listed.valid}
    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(10)
    assert {g.group_id for g in stable.valid} == {"adm-group"}

    desc = admin.describe_consumer_groups(["adm-group"])["adm-group"].result(10)
    assert desc.state == ConsumerGroupState.STABLE
    assert desc.partition_assignor == "range"
    (member,) = desc.members
    assert member.client_id == "adm-client"
    assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}

    req = ConsumerGroupTopicPartitions(
        "adm-group", [TopicPartition("adm", 0), TopicPartition("adm", 1)]
    )
    offs = admin.list_consumer_group_offsets([req])["adm-group"].result(10)
    assert {tp.partition: tp.offset for tp in offs.topic_partitions} == {0: 10, 1: 10}

    # Altering offsets of an active group is refused; of an empty one it works.
    alter = ConsumerGroupTopicPartitions("adm-group", [TopicPartition("adm", 0, 3)])
    refused = admin.alter_consumer_group_offsets([alter])["adm-group"].result(10)
    (tp,) = refused.topic_partitions
    assert tp.error is not None and tp.error.name() == "UNKNOWN_MEMBER_ID"
    c.close()
    admin.alter_consumer_group_offsets([alter])["adm-group"].result(10)
    offs = admin.list_consumer_group_offsets([req])["adm-group"].result(10)
    assert {tp.partition: tp.offset for tp in offs.topic_partitions} == {0: 3, 1: 10}

    empty = admin.describe_consumer_groups(["adm-group"])["adm-group"].result(10)
    assert empty.state == ConsumerGroupState.EMPTY and not empty.members
    admin.delete_consumer_groups(["adm-group"])["adm-group"].result(10)
    listed = admin.list_consumer_groups().result(10)
    assert "adm-group" not in {g.group_id for g in listed.valid}


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_group_survives_broker_restart_without_rebalance(broker_factory, kill: bool) -> None:
    """The group is reloaded Stable from `__consumer_offsets`: members that keep
    heartbeating keep their assignment, and consumption continues after the committed
    offsets."""
    b = broker_factory(**FAST)
    _topic(b.bootstrap, "rs", 2, 20)
    assigns: list[list[int]] = []

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        assigns.append(sorted(p.partition for p in parts))

    # librdkafka backs off reconnects up to reconnect.backoff.max.ms (10 s by default): after
    # a restart that took several seconds under load, the member could come back after its
    # 6 s session, which the reloaded group starts at load (as Kafka's does), and rightly
    # expire. Capping the back-off keeps the test about the reload, not the client's timer.
    c = _consumer(b.bootstrap, "rs-group", **{"reconnect.backoff.max.ms": 500})
    c.subscribe(["rs"], on_assign=on_assign)
    try:
        first = _drain([c], 20)
        assert len(first) == 20
        c.commit(asynchronous=False)
        b.restart(kill=kill)
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(20, 30):
            p.produce("rs", f"rs-{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0
        later = _drain([c], 10, timeout=40)
        assert sorted(later) == sorted(f"rs-{i}".encode() for i in range(20, 30))
        assert assigns == [[0, 1]], f"the restart caused a rebalance: {assigns}"
    finally:
        c.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_old_librdkafka_group_resumes(broker_factory) -> None:
    """kcat 1.7 ships librdkafka 2.0.2, which negotiates older group API versions."""
    b = broker_factory(**FAST)
    _topic(b.bootstrap, "kc", 2, 20)

    def kcat(*args: str) -> list[str]:
        r = subprocess.run(
            ["kcat", "-b", b.bootstrap, "-G", "kcat-group", "-q", *args, "kc"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    first = kcat("-c", "12", "-X", "auto.offset.reset=earliest")
    rest = kcat("-c", "8")
    assert sorted(first + rest) == sorted(f"kc-{i}" for i in range(20))
