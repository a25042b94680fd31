"""Deleting a share group (DeleteGroups, API 42, through confluent-kafka's AdminClient)
and its offsets on a topic (DeleteShareGroupOffsets, API 92, a raw request) against a
real `yak serve`: refused while a member is in the group, GROUP_ID_NOT_FOUND for one
unknown, and afterwards a consumer starts fresh by `share.auto.offset.reset` (the
deleted group's configs gone, its state gone)."""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

from confluent_kafka import KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.broker.rawclient import RawClient
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode


def _earliest(admin: AdminClient, group: str) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)


def _delete_group(admin: AdminClient, group: str) -> str | None:
    """The error's name, None when deleted."""
    try:
        admin.delete_consumer_groups([group], request_timeout=10)[group].result(15)
    except KafkaException as e:
        return e.args[0].name()
    return None


def _delete_offsets(bs: str, group: str, topics: list[str]) -> Any:
    mod = kio_compat.schema_module("delete_share_group_offsets", 0, "request")
    with RawClient(bs) as raw:
        return raw.request(kio_compat.build(
            mod.DeleteShareGroupOffsetsRequest, group_id=group, topics=tuple(
                kio_compat.build(mod.DeleteShareGroupOffsetsRequestTopic, topic_name=t)
                for t in topics)))


def _until_empty(call: Any, busy: Any) -> Any:
    """`call()` again while it answers `busy` (the closed consumer's leave is on its way)."""
    end = time.monotonic() + 15
    while True:
        out = call()
        if out != busy or time.monotonic() > end:
            return out
        time.sleep(0.2)  # a poll interval: the leave heartbeat is asynchronous in librdkafka


def _consume(stack: ExitStack, bs: str, want: int, produce: Producer | None = None,
             timeout: float = 30) -> dict[int, list[int]]:
    """{offset: delivery counts} from a new consumer of group g, until `want` offsets;
    with `produce`, a record is produced to q every second until the first arrives."""
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "g"})
    stack.callback(c.close)
    c.subscribe(["q"])
    seen: dict[int, list[int]] = {}
    end = time.monotonic() + timeout
    last = 0.0
    while len(seen) < want and time.monotonic() < end:
        if produce is not None and not seen and time.monotonic() - last > 1:
            produce.produce("q", b"late", partition=0)
            produce.flush(10)
            last = time.monotonic()
        for m in c.poll(0.2):
            assert m.error() is None, m.error()
            seen.setdefault(m.offset(), []).append(m.delivery_count())
    return seen


def test_deleting_a_share_group_and_its_offsets(broker) -> None:
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("q", 1, 1)])["q"].result(15)
    _earliest(admin, "g")
    p = Producer({"bootstrap.servers": bs})
    for i in range(3):
        p.produce("q", b"v%d" % i, partition=0)
    assert p.flush(15) == 0
    assert _delete_group(admin, "nobody") == "GROUP_ID_NOT_FOUND"
    assert _delete_offsets(bs, "nobody", ["q"]).error_code == ErrorCode.group_id_not_found
    with ExitStack() as stack:
        seen = _consume(stack, bs, 3)
        assert seen == {0: [1], 1: [1], 2: [1]}
        # a member is in the group: Kafka's NON_EMPTY_GROUP, nothing deleted
        assert _delete_group(admin, "g") == "NON_EMPTY_GROUP"
        assert _delete_offsets(bs, "g", ["q"]).error_code == ErrorCode.non_empty_group
    assert _until_empty(lambda: _delete_group(admin, "g"), "NON_EMPTY_GROUP") is None
    assert _delete_group(admin, "g") == "GROUP_ID_NOT_FOUND"  # no state, no configs left
    # Its configs went with it: share.auto.offset.reset is back to latest, so the new
    # consumer starts at the log end, never at 0..2 (earliest and the old state would
    # both hand out 0..2 or start at 3 before the late records come).
    with ExitStack() as stack:
        seen = _consume(stack, bs, 1, produce=p)
        assert seen and min(seen) >= 3, seen
        late = max(seen)
    # DeleteShareGroupOffsets on q: the state goes; with earliest again everything
    # comes again from 0, each at its first delivery
    resp = _until_empty(lambda: _delete_offsets(bs, "g", ["q", "missing"]).error_code,
                        ErrorCode.non_empty_group)
    assert resp == ErrorCode.none
    resp = _delete_offsets(bs, "g", ["q", "missing"])
    assert [(t.topic_name, t.error_code) for t in resp.responses] == [
        ("q", ErrorCode.none), ("missing", ErrorCode.unknown_topic_or_partition)]
    _earliest(admin, "g")
    with ExitStack() as stack:
        seen = _consume(stack, bs, late + 1)
    assert set(range(late + 1)) <= set(seen), seen  # (a late record after it may come too)
    assert all(counts == [1] for counts in seen.values()), seen
