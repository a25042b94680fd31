"""`yak group` gaps of issue 26: offset-delete, describe --members, and reset-offsets'
--shift-by, --by-duration, --all-topics and --export; against a real broker."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer

from tests.cli.test_cli import ok, one_line_error, yak


def join(bootstrap: str, group: str, topics: list[str], n: int) -> Consumer:
    """A live member of `group` that has consumed and committed `n` records."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "client.id": "gaps-client"})
    c.subscribe(topics)
    got = 0
    deadline = time.monotonic() + 40
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
    assert got == n
    c.commit(asynchronous=False)
    return c


def committed(b: list[str], group: str) -> dict[tuple[str, int], int | None]:
    doc = json.loads(ok("group", "describe", group, "--format", "json", *b))
    return {(r["topic"], r["partition"]): r["committed_offset"] for r in doc["partitions"]}


def test_offset_delete_and_members(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "od", "-p", "2", *b)
    ok("produce", "od", "-K", ":", *b, stdin="".join(f"k{i}:v{i}\n" for i in range(10)))
    c = join(broker.bootstrap, "odg", ["od"], 10)
    try:
        doc = json.loads(ok("group", "describe", "odg", "--members", "--format", "json", *b))
        assert doc["group"] == "odg" and doc["state"] == "Stable"
        [m] = doc["members"]
        assert m["client_id"] == "gaps-client" and m["partitions"] == 2
        assert m["assignment"] == [{"topic": "od", "partition": 0},
                                   {"topic": "od", "partition": 1}]
        text = ok("group", "describe", "odg", "--members", *b)
        assert "#PARTITIONS" in text and "od(0,1)" in text and m["member_id"] in text
        assert "LOG-END-OFFSET" not in text

        # an active member consumes the topic: refused per partition, exit 1
        r = yak("group", "offset-delete", "odg", "--topic", "od", "--format", "json", *b)
        assert r.returncode == 1
        assert {e["error"] for e in json.loads(r.stdout)} == {"GROUP_SUBSCRIBED_TO_TOPIC"}
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in r.stderr
    finally:
        c.close()
    before = committed(b, "odg")
    assert set(before) == {("od", 0), ("od", 1)} and None not in before.values()

    out = json.loads(ok("group", "offset-delete", "odg", "--topic", "od", "--partition", "1",
                        "--format", "json", *b))
    assert out == [{"topic": "od", "partition": 1, "error": None}]
    assert committed(b, "odg") == {("od", 0): before[("od", 0)]}
    text = ok("group", "offset-delete", "odg", "-t", "od", *b)
    assert "Successful" in text
    assert committed(b, "odg") == {}
    text = ok("group", "describe", "odg", "--members", *b)
    assert "no active members" in text

    r = yak("group", "offset-delete", "odg", "--topic", "od", "--partition", "7", *b)
    one_line_error(r, "no partition 7")
    assert r.returncode == 2
    r = yak("group", "offset-delete", "odg", "--topic", "nope", *b)
    one_line_error(r, "nope")
    r = yak("group", "offset-delete", "ghost", "--topic", "od", *b)
    one_line_error(r, "ghost", "GROUP_ID_NOT_FOUND")
    assert r.returncode == 1
