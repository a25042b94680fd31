"""`yak consume` gaps of issue 26: isolation level, start from a timestamp or a duration
ago, partition/offset/timestamp/headers on demand, a kcat-like format template, and
several topics or a regex, each against a real broker subprocess."""

from __future__ import annotations

import json

from tests.cli.test_cli import ok, one_line_error, yak
from tests.txn.wire import txn_producer


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
