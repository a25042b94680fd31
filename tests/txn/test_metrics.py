"""Transaction metrics on the embedded gateway's /metrics (Prometheus): commits, aborts,
timeouts, fenced instances, open transactions."""

from __future__ import annotations

import re

import httpx
from gateway.conftest import start_embedded  # tests/ is on sys.path

from tests.txn.wire import create_topic, spawn_producer, txn_producer, wait_until


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    assert m, f"{name} missing"
    return float(m.group(1))


def test_transaction_metrics(tmp_path) -> None:
    gw = start_embedded(tmp_path, "--set",
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms=300")
    try:
        bs = gw.bootstrap
        create_topic(bs, "m", 1)
        p = txn_producer(bs, "m-tx")
        p.init_transactions(30)
        for commit in (True, True, False):
            p.begin_transaction()
            p.produce("m", value=b"x")
            p.flush(30)
            if commit:
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)
        hanging = spawn_producer(bs, "m-hanging", "m", 1, timeout_ms=60_000)
        slow = spawn_producer(bs, "m-slow", "m", 1, timeout_ms=1000)

        def scrape() -> str:
            return httpx.get(gw.url + "/metrics", timeout=10).text

        text = wait_until(lambda: (t := scrape()) and metric(
            t, "yak_transactions_timed_out_total") == 1 and t, 20, "the timeout abort")
        assert metric(text, "yak_transactions_committed_total") == 2
        assert metric(text, "yak_transactions_aborted_total") == 2  # abort + timeout
        assert metric(text, "yak_transactions_open") == 1  # the hanging one
        hanging.kill()
        slow.kill()
        again = txn_producer(bs, "m-hanging")
        again.init_transactions(30)  # fences the hanging instance, aborts its transaction
        text = wait_until(lambda: (t := scrape()) and metric(
            t, "yak_transactions_open") == 0 and t, 20, "no open transactions")
        assert metric(text, "yak_transactions_fenced_total") == 1
        assert metric(text, "yak_transactions_aborted_total") == 3
    finally:
        gw.stop()
