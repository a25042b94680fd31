"""Share groups through the wire: confluent-kafka's (librdkafka's) ShareConsumer against a
real `yak serve` process. Share partitions start at the log end by default
(`share.auto.offset.reset=latest`), so each test lets its consumers start fetching before
it produces."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

LOCK_MS = 1000


@pytest.fixture
def share_broker(broker_factory: Callable[..., object]) -> object:
    return broker_factory(**{"group.share.record.lock.duration.ms": str(LOCK_MS),
                             "group.share.min.record.lock.duration.ms": "1000"})


def _topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def _produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(15) == 0


def _consumer(stack: ExitStack, bootstrap: str, group: str, topic: str,
              explicit: bool = False) -> ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ShareConsumer(conf)
    stack.callback(c.close)
    c.subscribe([topic])
    return c


def _warm(consumers: list[ShareConsumer], seconds: float = 4.0) -> None:
    """Join and open share sessions (the share partitions start at the log end then)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in consumers:
            assert list(c.poll(0.25)) == []


def _drain(consumers: list[ShareConsumer], want: int, timeout: float = 20.0,
           on_message: Callable[[ShareConsumer, object], None] | None = None,
           ) -> Iterator[tuple[int, object]]:
    end = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < end and seen < want:
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                seen += 1
                if on_message is not None:
                    on_message(c, m)
                yield i, m


def test_two_share_groups_each_receive_everything(broker) -> None:
    bs = broker.bootstrap
    _topic(bs, "q", 3)
    with ExitStack() as stack:
        consumers = [_consumer(stack, bs, g, "q") for g in ("g1", "g2")]
        _warm(consumers)
        _produce(bs, "q", 60, 3)
        got: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
        for i, m in _drain(consumers, 120):
            got[i].append((m.partition(), m.offset()))
    want = sorted((p, o) for p in range(3) for o in range(20))
    assert sorted(got[0]) == want
    assert sorted(got[1]) == want


@pytest.mark.parametrize("members", [2, 4])
def test_consumers_share_three_partitions_exactly_once(broker, members: int) -> None:
    """Default lock (30 s): one test thread polls the members in turn, and a member's
    client acquires (prefetches) records before the test polls it; a 1 s lock would
    expire on some of them, which is a redelivery, not a fault-free run."""
    bs = broker.bootstrap
    _topic(bs, "q", 3)
    with ExitStack() as stack:
        consumers = [_consumer(stack, bs, "g", "q") for _ in range(members)]
        _warm(consumers)
        _produce(bs, "q", 300, 3)
        got = [(m.partition(), m.offset()) for _, m in _drain(consumers, 300)]
        # nothing more arrives: every record was delivered once
        assert [m for _, m in _drain(consumers, 1, timeout=2.0)] == []
    assert sorted(got) == sorted((p, o) for p in range(3) for o in range(100))


def test_release_redelivers_and_reject_archives(share_broker) -> None:
    bs = share_broker.bootstrap
    _topic(bs, "q", 1)
    with ExitStack() as stack:
        c = _consumer(stack, bs, "g", "q", explicit=True)
        _warm([c])
        _produce(bs, "q", 10, 1)
        deliveries: dict[int, list[int]] = {}

        def ack(consumer: ShareConsumer, m: object) -> None:
            deliveries.setdefault(m.offset(), []).append(m.delivery_count())
            if m.offset() % 2 == 0 and m.delivery_count() == 1:
                consumer.acknowledge(m, AcknowledgeType.RELEASE)  # comes again
            elif m.offset() % 2 == 1:
                consumer.acknowledge(m, AcknowledgeType.REJECT)  # never again
            else:
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            consumer.commit_sync()

        list(_drain([c], 15, on_message=ack))
        list(_drain([c], 1, timeout=2.5 * LOCK_MS / 1000, on_message=ack))
    assert sorted(deliveries) == list(range(10))
    for offset, counts in deliveries.items():
        assert counts == ([1, 2] if offset % 2 == 0 else [1]), (offset, counts)


def test_lock_expiry_redelivers_within_lock_plus_one_second(share_broker) -> None:
    """A member that holds records without acknowledging them (explicit mode, no further
    poll): their locks expire and the other member gets them, with the next delivery
    count, within the lock + 1 s. (The other member's client may itself have prefetched
    them earlier and let its own locks lapse while it was not polled: then the holder got
    a later delivery, and the other must get the one after it.)"""
    bs = share_broker.bootstrap
    _topic(bs, "q", 1)
    with ExitStack() as stack:
        holder = _consumer(stack, bs, "g", "q", explicit=True)
        other = _consumer(stack, bs, "g", "q")
        _warm([holder, other])
        _produce(bs, "q", 5, 1)
        held: dict[int, tuple[float, int]] = {}
        end = time.monotonic() + 10
        while not held and time.monotonic() < end:
            held = {m.offset(): (time.monotonic(), m.delivery_count())
                    for m in holder.poll(0.2)}
        assert held
        seen: dict[tuple[int, int], float] = {}
        end = time.monotonic() + LOCK_MS / 1000 + 5
        while time.monotonic() < end and not all(
                (o, c + 1) in seen for o, (_, c) in held.items()):
            for m in other.poll(0.1):
                seen.setdefault((m.offset(), m.delivery_count()), time.monotonic())
    for offset, (t, count) in held.items():
        assert (offset, count + 1) in seen, (offset, count, sorted(seen))
        assert seen[(offset, count + 1)] - t <= LOCK_MS / 1000 + 1.0


def test_transaction_markers_do_not_stall_a_share_partition(share_broker) -> None:
    """Commit markers are gaps the broker archives itself: records after them keep
    flowing (a marker handed out and never acknowledged would hold the window)."""
    bs = share_broker.bootstrap
    _topic(bs, "q", 1)
    with ExitStack() as stack:
        c = _consumer(stack, bs, "g", "q")
        _warm([c])
        p = Producer({"bootstrap.servers": bs, "transactional.id": "tx"})
        p.init_transactions(15)
        for round_ in range(3):
            p.begin_transaction()
            for i in range(5):
                p.produce("q", value=b"r%d-%d" % (round_, i), partition=0)
            p.commit_transaction(15)
        values = sorted(m.value() for _, m in _drain([c], 15, timeout=10))
    assert values == sorted(b"r%d-%d" % (r, i) for r in range(3) for i in range(5))


def test_records_committed_before_close_are_not_delivered_again(share_broker) -> None:
    """Implicit mode accepts a poll's records at the next poll or commit (librdkafka 2.16
    sends nothing for the last poll at close: those would come again), so commit, close,
    and no other member of the group may see them."""
    bs = share_broker.bootstrap
    _topic(bs, "q", 1)
    with ExitStack() as stack:
        first = ShareConsumer({"bootstrap.servers": bs, "group.id": "g"})
        first.subscribe(["q"])
        try:
            _warm([first])
            _produce(bs, "q", 10, 1)
            got = sorted(m.offset() for _, m in _drain([first], 10))
            first.commit_sync()
        finally:
            first.close()
        assert got == list(range(10))
        second = _consumer(stack, bs, "g", "q")
        again = [m.offset() for _, m in _drain([second], 1, timeout=LOCK_MS / 1000 + 4)]
    assert again == []


def test_group_configs_through_incremental_alter_configs(share_broker) -> None:
    """share.auto.offset.reset=earliest set on the GROUP resource before consuming: the
    records produced before the group existed are delivered; values outside the broker's
    group.share.* bounds are INVALID_CONFIG."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    bs = share_broker.bootstrap
    _topic(bs, "q", 2)
    _produce(bs, "q", 20, 2)
    admin = AdminClient({"bootstrap.servers": bs})

    def alter(key: str, value: str) -> None:
        res = ConfigResource(ResourceType.GROUP, "g", incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(10)

    for key, bad in (("share.auto.offset.reset", "sometimes"),
                     ("share.record.lock.duration.ms", "10"),  # below the broker's min
                     ("share.delivery.count.limit", "11")):
        with pytest.raises(KafkaException) as e:
            alter(key, bad)
        assert e.value.args[0].name() == "INVALID_CONFIG"
    alter("share.auto.offset.reset", "earliest")
    with ExitStack() as stack:
        c = _consumer(stack, bs, "g", "q")
        got = sorted((m.partition(), m.offset()) for _, m in _drain([c], 20))
    assert got == sorted((p, o) for p in range(2) for o in range(10))


def test_delivery_count_limit_archives(share_broker) -> None:
    """share.delivery.count.limit=2: a record released at each delivery comes twice, then
    never again."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    bs = share_broker.bootstrap
    _topic(bs, "q", 1)
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.GROUP, "g", incremental_configs=[
        ConfigEntry("share.delivery.count.limit", "2",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    _produce(bs, "q", 5, 1)
    counts: dict[int, list[int]] = {}

    def release(consumer: ShareConsumer, m: object) -> None:
        counts.setdefault(m.offset(), []).append(m.delivery_count())
        consumer.acknowledge(m, AcknowledgeType.RELEASE)
        consumer.commit_sync()

    with ExitStack() as stack:
        c = _consumer(stack, bs, "g", "q", explicit=True)
        list(_drain([c], 10, on_message=release))
        list(_drain([c], 1, timeout=2.5 * LOCK_MS / 1000, on_message=release))
    assert counts == {o: [1, 2] for o in range(5)}
