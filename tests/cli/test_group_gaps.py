"""`yak group` gaps of issue 26: offset-delete, describe --members, and reset-offsets'
--shift-by, --by-duration, --all-topics and --export; against a real broker."""

from __future__ import annotations

import json
import time

import pytest
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


@pytest.mark.slow
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


@pytest.mark.slow  # 21-39 s of CLI processes; CI keeps under 30 min (make test-slow runs it)
def test_reset_offsets_shift_duration_all_topics_export(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "ra", "-p", "2", *b)
    ok("topic", "create", "rb", *b)
    two_hours_ago = str(int(time.time() * 1000) - 2 * 3600 * 1000)
    ok("produce", "ra", "-p", "0", "--timestamp", two_hours_ago, *b, stdin="o\n" * 5)
    ok("produce", "ra", "-p", "0", *b, stdin="n\n" * 5)
    ok("produce", "ra", "-p", "1", *b, stdin="n\n" * 4)
    ok("produce", "rb", *b, stdin="n\n" * 3)
    join(broker.bootstrap, "rg", ["ra", "rb"], 17).close()
    full = {("ra", 0): 10, ("ra", 1): 4, ("rb", 0): 3}
    assert committed(b, "rg") == full

    def reset(*args: str) -> list[dict]:
        return json.loads(ok("group", "reset-offsets", "rg", *args, "--format", "json", *b))

    assert reset("--topic", "ra", "--shift-by", "-3", "--dry-run") == [
        {"topic": "ra", "partition": 0, "new_offset": 7},
        {"topic": "ra", "partition": 1, "new_offset": 1}]
    assert committed(b, "rg") == full
    assert reset("--all-topics", "--shift-by", "-100") == [
        {"topic": "ra", "partition": 0, "new_offset": 0},
        {"topic": "ra", "partition": 1, "new_offset": 0},
        {"topic": "rb", "partition": 0, "new_offset": 0}]
    assert committed(b, "rg") == {k: 0 for k in full}
    assert reset("-t", "ra", "-p", "0", "--shift-by", "2")[0]["new_offset"] == 2
    assert reset("-t", "ra", "-p", "0", "--shift-by", "100")[0]["new_offset"] == 10

    # --by-duration: the first record at or after that long ago
    assert reset("-t", "ra", "-p", "0", "--by-duration", "1h")[0]["new_offset"] == 5
    assert reset("-t", "ra", "-p", "0", "--by-duration", "PT3H")[0]["new_offset"] == 0
    assert reset("-t", "ra", "-p", "0", "--by-duration", "PT30M")[0]["new_offset"] == 5
    assert committed(b, "rg") == {("ra", 0): 5, ("ra", 1): 0, ("rb", 0): 0}

    # --export: kafka-consumer-groups.sh's CSV, topic,partition,offset
    r = yak("group", "reset-offsets", "rg", "--all-topics", "--to-latest", "--export", *b)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["ra,0,10", "ra,1,4", "rb,0,3"]
    assert committed(b, "rg") == full
    r = yak("group", "reset-offsets", "rg", "-t", "rb", "--to-earliest", "--export",
            "--dry-run", *b)
    assert r.stdout.splitlines() == ["rb,0,0"]
    assert committed(b, "rg") == full

    for bad, frag in [
        (["--topic", "ra", "--all-topics", "--to-latest"], "--all-topics"),
        (["--to-latest"], "--all-topics"),
        (["--all-topics", "-p", "0", "--to-latest"], "--partition"),
        (["-t", "ra", "--by-duration", "soon"], "--by-duration"),
        (["-t", "ra", "--shift-by", "1", "--to-latest"], "--shift-by"),
        (["-t", "ra", "--to-latest", "--export", "--format", "json"], "--export"),
    ]:
        r = yak("group", "reset-offsets", "rg", *bad, *b)
        one_line_error(r, frag)
        assert r.returncode == 2, bad
    r = yak("group", "reset-offsets", "fresh", "-t", "ra", "--shift-by", "1", *b)
    one_line_error(r, "no committed offset", "ra-0")
    assert r.returncode == 1
    r = yak("group", "reset-offsets", "fresh", "--all-topics", "--to-latest", *b)
    one_line_error(r, "no committed offsets")
