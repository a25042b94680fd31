"""`yak consume` gaps of issue 26: isolation level, start from a timestamp or a duration
ago, partition/offset/timestamp/headers on demand, a kcat-like format template, and
several topics or a regex, each against a real broker subprocess."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from tests.cli.test_cli import ok, one_line_error, yak
from tests.txn.wire import txn_producer


@pytest.mark.slow  # 21-39 s of CLI processes; CI keeps under 30 min (make test-slow runs it)
def test_isolation_level(module_broker) -> None:
    bs = module_broker.bootstrap
    b = ["--bootstrap", bs]
    ok("topic", "create", "iso", "-p", "1", *b)
    ok("produce", "iso", "-q", *b, stdin="plain\n")
    p = txn_producer(bs, "iso-open")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("iso", value=b"pending", partition=0)
    assert p.flush(30) == 0  # written, transaction still open
    try:
        out = ok("consume", "iso", "--from-beginning", "--idle-timeout", "2",
                 "--isolation-level", "read_uncommitted", "--format", "json", *b)
        assert [json.loads(m)["value"] for m in out.splitlines()] == ["plain", "pending"]
        # read_committed (the default) stops at the open transaction.
        for extra in ([], ["--isolation-level", "read_committed"]):
            out = ok("consume", "iso", "--from-beginning", "--idle-timeout", "2", *extra, *b)
            assert out.splitlines() == ["plain"]
        # with a group too
        out = ok("consume", "iso", "--group", "iso-g", "--from-beginning", "-n", "2",
                 "--isolation-level", "read_uncommitted", *b)
        assert out.splitlines() == ["plain", "pending"]
    finally:
        p.abort_transaction(30)
    r = yak("consume", "iso", "--isolation-level", "dirty", *b)
    one_line_error(r, "--isolation-level", "read_committed")
    assert r.returncode == 2


@pytest.mark.slow  # 21-39 s of CLI processes; CI keeps under 30 min (make test-slow runs it)
def test_from_timestamp_and_since(module_broker) -> None:
    bs = module_broker.bootstrap
    b = ["--bootstrap", bs]
    ok("topic", "create", "times", "-p", "2", *b)
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": bs, "log_level": 0})
    stamps = {"old-0": now - 3 * 3_600_000, "old-1": now - 2 * 3_600_000,
              "mid-0": now - 30 * 60_000, "new-1": now - 60_000, "new-0": now}
    for value, ts in stamps.items():
        p.produce("times", value=value.encode(), partition=int(value[-1]), timestamp=ts)
    assert p.flush(30) == 0

    def values(*args: str) -> list[str]:
        out = ok("consume", "times", "--idle-timeout", "2", "--format", "json", *args, *b)
        return sorted(json.loads(line)["value"] for line in out.splitlines())

    assert values("--from-timestamp", str(now - 2 * 3_600_000)) == [
        "mid-0", "new-0", "new-1", "old-1"]
    assert values("--from-timestamp", str(now - 60_000), "-p", "1") == ["new-1"]
    assert values("--since", "1h") == ["mid-0", "new-0", "new-1"]
    assert values("--since", "2h30m") == ["mid-0", "new-0", "new-1", "old-1"]
    assert values("--since", "5m") == ["new-0", "new-1"]
    assert values("--from-timestamp", str(now + 3_600_000)) == []  # none: the end

    for bad, frag in ((["--since", "soon"], "invalid --since"),
                      (["--since", "10m", "--from-beginning"], "cannot be combined"),
                      (["--from-timestamp", "1", "--offset", "3"], "cannot be combined"),
                      (["--since", "1h", "--group", "g"], "--group cannot")):
        r = yak("consume", "times", *bad, *b)
        one_line_error(r, frag)
        assert r.returncode == 2


def test_print_partition_offset_timestamp_headers(module_broker) -> None:
    b = ["--bootstrap", module_broker.bootstrap]
    ok("topic", "create", "printed", "-p", "3", *b)
    ok("produce", "printed", "-p", "2", "-K", ":", "-H", "src=cli", "-H", "n=1", "-q", *b,
       stdin="k1:v1\nk2:v2\n")
    common = ["consume", "printed", "--from-beginning", "-n", "2", *b]
    js = [json.loads(line) for line in ok(*common, "--format", "json").splitlines()]
    assert [(m["partition"], m["offset"], m["key"], m["value"]) for m in js] == [
        (2, 0, "k1", "v1"), (2, 1, "k2", "v2")]
    assert all(m["headers"] == [{"key": "src", "value": "cli"}, {"key": "n", "value": "1"}]
               and m["timestamp_type"] == "CreateTime" for m in js)
    out = ok(*common, "--print-timestamp", "--print-partition", "--print-offset",
             "--print-headers", "--print-key")
    assert out.splitlines() == [
        f"CreateTime:{m['timestamp']}\tPartition:2\tOffset:{m['offset']}\tsrc:cli,n:1\t"
        f"{m['key']}\t{m['value']}" for m in js]
    out = ok(*common, "--print-partition", "--print-offset", "--key-separator", " | ")
    assert out.splitlines() == ["Partition:2 | Offset:0 | v1", "Partition:2 | Offset:1 | v2"]
    ok("produce", "printed", "-p", "0", "-q", *b, stdin="bare\n")
    out = ok("consume", "printed", "-p", "0", "--from-beginning", "-n", "1", "--print-headers",
             *b)
    assert out.splitlines() == ["NO_HEADERS\tbare"]


def test_format_template(module_broker) -> None:
    b = ["--bootstrap", module_broker.bootstrap]
    ok("topic", "create", "tmpl", "-p", "2", *b)
    ok("produce", "tmpl", "-p", "1", "-K", ":", "-H", "a=1", "-H", "b=x", "-q", *b,
       stdin="key:välue\n:empty-key\n")
    common = ["consume", "tmpl", "-p", "1", "--from-beginning", "-n", "2", *b]
    js = [json.loads(line) for line in ok(*common, "--format", "json").splitlines()]
    out = ok(*common, "--format-template", r"%t %p %o %k=%v %T [%h] %K/%V %%\n")
    assert out.splitlines() == [
        f"tmpl 1 {m['offset']} {m['key']}={m['value']} {m['timestamp']} [a=1,b=x]"
        f" {len(m['key'].encode())}/{len(m['value'].encode())} %" for m in js]
    assert out.splitlines()[0].startswith("tmpl 1 0 key=välue ")
    # kcat's %s for the value, tabs, no newline unless asked; rpk's --format '%v\n' too.
    assert ok(*common, "--format-template", r"%o\t%s;") == "0\tvälue;1\tempty-key;"
    assert ok(*common, "--format", r"%v\n").splitlines() == ["välue", "empty-key"]
    for bad, frag in ((["--format-template", "%q"], "unknown %q"),
                      (["--format-template", "%v", "--format", "json"], "cannot be combined")):
        r = yak("consume", "tmpl", *bad, *b)
        one_line_error(r, frag)
        assert r.returncode == 2


@pytest.mark.slow  # 21-39 s of CLI processes; CI keeps under 30 min (make test-slow runs it)
def test_several_topics_and_regex(module_broker) -> None:
    b = ["--bootstrap", module_broker.bootstrap]
    for t in ("orders-eu", "orders-us", "xorders-1", "audit"):
        ok("topic", "create", t, "-p", "2", *b)
        ok("produce", t, "-p", "1", "-q", *b, stdin=f"{t}-a\n{t}-b\n")

    def read(*args: str, n: int) -> list[tuple[str, int, int, str]]:
        out = ok("consume", *args, "--from-beginning", "-n", str(n), "--idle-timeout", "20",
                 "--format", "json", *b)
        msgs = [json.loads(line) for line in out.splitlines()]
        return sorted((m["topic"], m["partition"], m["offset"], m["value"]) for m in msgs)

    def rows(*topics: str) -> list[tuple[str, int, int, str]]:
        return sorted((t, 1, o, f"{t}-{v}") for t in topics for o, v in enumerate("ab"))

    assert read("orders-eu", "audit", n=4) == rows("audit", "orders-eu")
    # kcat's ^ prefix (a search: xorders-1 does not start with orders-), plus a name.
    assert read("^orders-.*", "audit", n=6) == rows("audit", "orders-eu", "orders-us")
    # Kafka's --include: the whole name must match.
    assert read("--include", "orders-.*", n=4) == rows("orders-eu", "orders-us")
    assert read("--include", ".*orders-.*", "-p", "1", n=6) == rows(
        "orders-eu", "orders-us", "xorders-1")
    out = ok("consume", "^orders-", "-p", "1", "--from-beginning", "-n", "4",
             "--format-template", r"%t:%o:%v\n", *b)
    assert sorted(out.splitlines()) == [
        "orders-eu:0:orders-eu-a", "orders-eu:1:orders-eu-b",
        "orders-us:0:orders-us-a", "orders-us:1:orders-us-b"]
    # a group over a regex and a name
    got = read("^orders-e", "audit", "--group", "multi", n=4)
    assert [(t, v) for t, _, _, v in got] == [(t, v) for t, _, _, v in rows("audit",
                                                                              "orders-eu")]

    one_line_error(yak("consume", "^nothing-.*", "-n", "1", *b), "no topic matches")
    one_line_error(yak("consume", "orders-eu", "missing", "-n", "1", *b), "'missing'")
    for bad, frag in ((["^orders-("], "invalid topic regular expression"),
                      ([], "give at least one TOPIC")):
        r = yak("consume", *bad, *b)
        one_line_error(r, frag)
        assert r.returncode == 2
