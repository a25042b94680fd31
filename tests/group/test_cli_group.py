"""`yak group` end to end: the lag it shows, and resets refused while the group is live."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(120)


def yak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "yak.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(*args: str) -> str:
    r = yak(*args)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.slow
def test_group_list_describe_lag_reset_delete(broker_factory) -> None:
    b = broker_factory(**{"group.initial.rebalance.delay.ms": "0"})
    bs = ["--bootstrap", b.bootstrap]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("lag", 2, 1)])["lag"].result(15)
    p = Producer({"bootstrap.servers": b.bootstrap})
    t_before = int(time.time() * 1000) - 1
    for i in range(30):
        p.produce("lag", b"v%d" % i, partition=i % 2)
    p.flush(15)
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "cg",
            "client.id": "lag-reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe(["lag"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 30 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got += 1
    assert got == 30
    c.commit(asynchronous=False)
    for i in range(10):
        p.produce("lag", b"late%d" % i, partition=0)
    p.flush(15)

    groups = json.loads(ok("group", "list", "--format", "json", *bs))
    assert {"group": "cg", "state": "Stable", "type": "classic"} in groups

    desc = json.loads(ok("group", "describe", "cg", "--format", "json", *bs))
    assert desc["state"] == "Stable" and desc["assignor"] == "range"
    (member,) = desc["members"]
    assert member["client_id"] == "lag-reader"
    assert member["assignment"] == ["lag-0", "lag-1"]
    lag = {
        r["partition"]: (r["committed_offset"], r["log_end_offset"], r["lag"])
        for r in desc["partitions"]
    }
    assert lag == {0: (15, 25, 10), 1: (15, 15, 0)}
    assert desc["total_lag"] == 10
    table = ok("group", "describe", "cg", *bs)
    assert "LOG-END-OFFSET" in table and "LAG" in table and "Stable" in table

    refused = yak("group", "reset-offsets", "cg", "--topic", "lag", "--to-earliest", *bs)
    assert refused.returncode != 0
    assert "stop its consumers" in refused.stderr and len(refused.stderr.splitlines()) == 1
    c.close()

    def offsets(*how: str) -> dict[int, int]:
        rows = json.loads(
            ok("group", "reset-offsets", "cg", "--topic", "lag", *how, "--format", "json", *bs)
        )
        return {r["partition"]: r["new_offset"] for r in rows}

    assert offsets("--to-earliest") == {0: 0, 1: 0}
    desc = json.loads(ok("group", "describe", "cg", "--format", "json", *bs))
    assert desc["state"] == "Empty" and desc["total_lag"] == 40
    assert offsets("--to-offset", "20") == {0: 20, 1: 15}  # clamped to the log end
    assert offsets("--to-latest") == {0: 25, 1: 15}
    assert offsets("--to-datetime", "2100-01-01T00:00:00Z") == {0: 25, 1: 15}
    past = datetime_iso(t_before)
    assert offsets("--to-datetime", past) == {0: 0, 1: 0}
    dry = json.loads(
        ok(
            "group",
            "reset-offsets",
            "cg",
            "-t",
            "lag",
            "--to-latest",
            "--dry-run",
            "-f",
            "json",
            *bs,
        )
    )
    assert {r["partition"]: r["new_offset"] for r in dry} == {0: 25, 1: 15}
    desc = json.loads(ok("group", "describe", "cg", "--format", "json", *bs))
    assert desc["total_lag"] == 40  # the dry run committed nothing

    bad = yak("group", "reset-offsets", "cg", "--topic", "lag", *bs)
    assert bad.returncode == 2 and "exactly one" in bad.stderr

    ok("group", "delete", "cg", *bs)
    assert "cg" not in {g["group"] for g in json.loads(ok("group", "list", "-f", "json", *bs))}
    gone = yak("group", "describe", "cg", *bs)
    assert gone.returncode != 0 and "does not exist" in gone.stderr


def datetime_iso(ms: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat()


def test_consume_with_group_resumes_from_committed_offsets(broker_factory) -> None:
    b = broker_factory(**{"group.initial.rebalance.delay.ms": "0"})
    bs = ["--bootstrap", b.bootstrap]
    ok("topic", "create", "cq", "-p", "2", *bs)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        p.produce("cq", b"m%d" % i, partition=i % 2)
    p.flush(15)
    first = ok("consume", "cq", "--group", "cli-g", "--from-beginning", "-n", "6", *bs)
    second = ok("consume", "cq", "-g", "cli-g", "-n", "4", "--idle-timeout", "10", *bs)
    got = first.split() + second.split()
    assert sorted(got) == sorted(f"m{i}" for i in range(10)), (first, second)
    desc = json.loads(ok("group", "describe", "cli-g", "--format", "json", *bs))
    assert desc["state"] == "Empty" and desc["total_lag"] == 0
    bad = yak("consume", "cq", "--group", "x", "--partition", "0", *bs)
    assert bad.returncode == 2 and "--group" in bad.stderr
