"""`yak txn list|describe|abort` against a real broker with a real hanging transaction."""

from __future__ import annotations

import json

from tests.cli.test_cli import ok, one_line_error, yak
from tests.txn.wire import create_topic, read_all, spawn_producer, txn_producer, watermarks


def test_list_describe_abort_a_hanging_transaction(broker) -> None:
    bs = broker.bootstrap
    create_topic(bs, "cli-txn", 2)
    done = txn_producer(bs, "cli-done")
    done.init_transactions(30)
    done.begin_transaction()
    done.produce("cli-txn", value=b"kept", partition=1)
    done.commit_transaction(30)
    proc = spawn_producer(bs, "cli-hanging", "cli-txn", 3)  # open, in partition 0
    try:
        out = ok("txn", "list", "-b", bs)
        lines = {ln.split()[0]: ln.split() for ln in out.splitlines()[1:]}
        assert lines["cli-hanging"][2] == "Ongoing" and lines["cli-done"][2] == "CompleteCommit"
        listed = json.loads(ok("txn", "list", "-b", bs, "--state", "Ongoing", "-f", "json"))
        assert [t["transactional_id"] for t in listed] == ["cli-hanging"]
        assert json.loads(ok("txn", "list", "-b", bs, "--pattern", "cli-d.*", "-f", "json"))[0][
            "transactional_id"] == "cli-done"

        d = json.loads(ok("txn", "describe", "cli-hanging", "-b", bs, "-f", "json"))
        assert d["state"] == "Ongoing" and d["partitions"] == ["cli-txn-0"]
        assert d["age_ms"] >= 0 and d["timeout_ms"] == 60000
        text = ok("txn", "describe", "cli-hanging", "-b", bs)
        assert "Ongoing" in text and "cli-txn-0" in text

        assert watermarks(bs, "cli-txn", 0, "read_committed")[1] == 0  # pinned by it
        out = ok("txn", "abort", "-b", bs, "--topic", "cli-txn", "--partition", "0")
        assert f"producer {d['producer_id']}" in out
        assert watermarks(bs, "cli-txn", 0, "read_committed")[1] == 4  # 3 records + marker
        assert read_all(bs, "cli-txn", [0, 1], "read_committed") == [(1, 0, b"kept")]
        # nothing left to abort there
        one_line_error(yak("txn", "abort", "-b", bs, "--topic", "cli-txn", "--partition", "0"),
                       "no open transaction")
    finally:
        proc.kill()
        proc.wait(10)


def test_errors_are_one_line(broker) -> None:
    bs = broker.bootstrap
    r = yak("txn", "describe", "nobody", "-b", bs)
    assert r.returncode == 1
    one_line_error(r, "TRANSACTIONAL_ID_NOT_FOUND")
    r = yak("txn", "list", "-b", bs, "--state", "Bogus")
    assert r.returncode == 2
    one_line_error(r, "Bogus")
    r = yak("txn", "abort", "-b", bs, "--topic", "t", "--partition", "0", "--producer-id", "3")
    assert r.returncode == 2
    r = yak("txn", "list", "-b", "127.0.0.1:1", "--timeout", "1")
    assert r.returncode == 1
    one_line_error(r, "unreachable")
