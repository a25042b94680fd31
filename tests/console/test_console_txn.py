"""The console's Transactions view in headless Chromium: an open transaction with its age
and the LSO lag of its partition, gone once the transactional id is re-initialised."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gateway.conftest import start_embedded

from console import test_console as base  # tests/ is on sys.path
from tests.txn.wire import create_topic, spawn_producer, txn_producer

pytestmark = base.pytestmark
browser_context = base.browser_context  # the module-scoped Chromium fixture
shot = base.shot


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    gw = start_embedded(tmp_path_factory.mktemp("yak-console-txn"))
    yield gw
    gw.stop()


def test_open_transaction_age_and_lso_lag(browser_context: Any, served: Any) -> None:
    bs = served.bootstrap
    create_topic(bs, "console-txn", 2)
    done = txn_producer(bs, "console-done")
    done.init_transactions(30)
    done.begin_transaction()
    done.produce("console-txn", value=b"ok", partition=1)
    done.commit_transaction(30)
    proc = spawn_producer(bs, "console-open", "console-txn", 3)  # 3 records in partition 0
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(served.url + "/")
        page.click("a[data-nav=transactions]")
        row = page.wait_for_selector("tr[data-txn='console-open']")
        text = row.inner_text()
        assert "Ongoing" in text and "console-txn-0" in text
        assert row.query_selector(".lag").inner_text() == "3"
        age = row.query_selector(".age").inner_text()
        assert age.endswith(" s") or age.endswith(" ms")
        assert page.query_selector("tr[data-txn='console-done']") is None  # finished: not open
        lso = page.wait_for_selector("#lso-table tr[data-tp='console-txn-0']")
        assert lso.query_selector(".lag").inner_text() == "3"
        shot(page, "20-transactions-open")
        # the view polls every 3 s: the age grows
        page.wait_for_function(
            "(a) => document.querySelector(\"tr[data-txn='console-open'] .age\")"
            " .textContent !== a", arg=age, timeout=15_000)
    finally:
        proc.kill()
        proc.wait(10)
    again = txn_producer(bs, "console-open")
    again.init_transactions(30)  # aborts the dangling transaction
    page.wait_for_selector("tr[data-txn='console-open']", state="detached", timeout=15_000)
    page.wait_for_selector("text=Every partition is readable up to its high watermark")
    shot(page, "21-transactions-none")
    assert errors == []
