"""`yak share-group list|describe|reset-offsets|delete` against a real `yak serve` with
confluent-kafka's ShareConsumer: the group listed, its member and per-partition start
offsets and lag described, a reset refused while the member is in (NON_EMPTY_GROUP) and
done once it left (the next consumer gets every record from the new start again), the
group deleted; bad input is one line and exit 2."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.cli.test_cli import ok, one_line_error, yak


def _earliest(admin: AdminClient, group: str) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)


def _consume(c: ShareConsumer, want: int, timeout: float = 30) -> dict[tuple[int, int], int]:
    """{(partition, offset): delivery count} until `want` records, each accepted."""
    seen: dict[tuple[int, int], int] = {}
    end = time.monotonic() + timeout
    while len(seen) < want and time.monotonic() < end:
        for m in c.poll(0.2):
            assert m.error() is None, m.error()
            seen[(m.partition(), m.offset())] = m.delivery_count()
    return seen


def _until(fn: Any, timeout: float = 15) -> Any:
    end = time.monotonic() + timeout
    while True:
        got = fn()
        if got or time.monotonic() > end:
            return got
        time.sleep(0.2)


@pytest.mark.slow
def test_list_describe_reset_delete(broker) -> None:
    bs = broker.bootstrap
    b = ["-b", bs]
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("sq", 2, 1)])["sq"].result(15)
    _earliest(admin, "sg")
    p = Producer({"bootstrap.servers": bs})
    for i in range(10):
        p.produce("sq", b"v%d" % i, partition=i % 2)
    assert p.flush(15) == 0

    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "sg", "client.id": "cli-test"})
    try:
        c.subscribe(["sq"])
        seen = _consume(c, 10)
        assert len(seen) == 10 and set(seen.values()) == {1}
        c.commit_sync()  # the implicit acks of the last poll
        listed = json.loads(ok("share-group", "list", *b, "-f", "json"))
        assert {"group": "sg", "state": "Stable"} in listed
        assert "sg" in ok("share-group", "list", *b)

        def described() -> dict[str, Any] | None:
            d = json.loads(ok("share-group", "describe", "sg", *b, "-f", "json"))
            parts = {(r["topic"], r["partition"]): r for r in d["partitions"]}
            return d if all(parts.get(("sq", i), {}).get("start_offset") == 5
                            for i in (0, 1)) else None

        d = _until(described)
        assert d is not None, ok("share-group", "describe", "sg", *b, "-f", "json")
        assert d["state"] == "Stable" and len(d["members"]) == 1
        m = d["members"][0]
        assert m["client_id"] == "cli-test" and m["subscriptions"] == ["sq"]
        assert sorted(m["assignment"]) == ["sq-0", "sq-1"]
        for r in d["partitions"]:
            assert (r["log_end_offset"], r["lag"]) == (5, 0), r
        text = ok("share-group", "describe", "sg", *b)
        assert "START-OFFSET" in text and "cli-test" in text

        # a member is in: Kafka's NON_EMPTY_GROUP, nothing moves
        r = yak("share-group", "reset-offsets", "sg", "--topic", "sq", "--to-earliest", *b)
        assert r.returncode == 1
        one_line_error(r, "NON_EMPTY_GROUP", "stop its consumers")
        # a dry run needs no empty group and changes nothing
        dry = json.loads(ok("share-group", "reset-offsets", "sg", "--topic", "sq",
                            "--to-offset", "2", "--dry-run", *b, "-f", "json"))
        assert dry == [{"topic": "sq", "partition": 0, "new_start_offset": 2},
                       {"topic": "sq", "partition": 1, "new_start_offset": 2}]
    finally:
        c.close()

    def reset() -> list[Any] | None:
        r = yak("share-group", "reset-offsets", "sg", "--all-topics", "--to-offset", "3",
                *b, "-f", "json")
        return json.loads(r.stdout) if r.returncode == 0 else None  # the leave is async

    assert _until(reset) == [{"topic": "sq", "partition": 0, "new_start_offset": 3},
                             {"topic": "sq", "partition": 1, "new_start_offset": 3}]
    d = json.loads(ok("share-group", "describe", "sg", *b, "-f", "json"))
    assert d["state"] == "Empty" and d["members"] == []
    assert [(r["partition"], r["start_offset"], r["lag"]) for r in d["partitions"]] == [
        (0, 3, 2), (1, 3, 2)]
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "sg"})
    try:
        c.subscribe(["sq"])
        again = _consume(c, 4)
        assert again == {(0, 3): 1, (0, 4): 1, (1, 3): 1, (1, 4): 1}
        c.commit_sync()
    finally:
        c.close()

    def deleted() -> bool:
        return yak("share-group", "delete", "sg", *b).returncode == 0

    assert _until(deleted)
    one_line_error(yak("share-group", "delete", "sg", *b), "GROUP_ID_NOT_FOUND")
    assert "sg" not in {g["group"] for g in json.loads(ok("share-group", "list", *b, "-f",
                                                            "json"))}

    # a group no consumer joined yet: its start offsets set first, then described (the
    # coordinator does not know it: shown Empty while it has state) and deleted
    one_line_error(yak("share-group", "describe", "fresh", *b), "GROUP_ID_NOT_FOUND")
    ok("share-group", "reset-offsets", "fresh", "--topic", "sq", "-p", "1", "--to-offset",
       "4", *b)
    d = json.loads(ok("share-group", "describe", "fresh", *b, "-f", "json"))
    assert d["state"] == "Empty" and d["members"] == []
    assert [(r["topic"], r["partition"], r["start_offset"]) for r in d["partitions"]] == [
        ("sq", 1, 4)]
    ok("share-group", "delete", "fresh", *b)
    one_line_error(yak("share-group", "describe", "fresh", *b), "GROUP_ID_NOT_FOUND")


@pytest.mark.slow
def test_bad_input_is_one_line(broker) -> None:
    b = ["-b", broker.bootstrap]
    for args in (
        ("reset-offsets", "g", "--topic", "t"),  # no --to-*
        ("reset-offsets", "g", "--to-earliest", "--to-latest", "--topic", "t"),
        ("reset-offsets", "g", "--to-earliest"),  # no --topic / --all-topics
        ("reset-offsets", "g", "--all-topics", "-p", "0", "--to-latest"),
        ("reset-offsets", "g", "--topic", "t", "--to-offset", "-4"),
        ("reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday"),
        ("reset-offsets", "g", "--topic", "missing", "--to-latest"),
        ("list", "-f", "yaml"),
        ("list", "--state", "Sleepy"),
    ):
        r = yak("share-group", *args, *b)
        assert r.returncode == 2, (args, r.stderr)
        one_line_error(r)
    r = yak("share-group", "describe", "nobody", *b)
    assert r.returncode == 1
    one_line_error(r, "GROUP_ID_NOT_FOUND")
    r = yak("share-group", "list", "-b", "127.0.0.1:1", "--timeout", "1")
    assert r.returncode == 1
    one_line_error(r, "cannot reach")
