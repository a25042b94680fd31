"""The console on a cluster (issue 26), in headless Chromium: a stopped broker stays in the
brokers table, marked offline, and a long under-replicated list is shown a page at a time.
Screenshots in test-artifacts/console/."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

# The cluster fixtures (a real etcd and `yak serve --metadata etcd://...` brokers).
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401

from .test_console import browser_context, pytestmark, shot  # noqa: F401

PARTITIONS = 45  # over two pages of 20


@pytest.mark.slow
def test_stopped_broker_is_offline_and_urps_are_paged(browser_context: Any,  # noqa: F811
                                                      cluster_factory: Any) -> None:  # noqa: F811
    c = cluster_factory(2, http=True, **{"replica.lag.time.max.ms": "2000"})
    a = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
    a.create_topics([NewTopic("wide", PARTITIONS, 2)])["wide"].result(30)
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"http://{c[1].http}/")
    page.wait_for_function("document.querySelectorAll('#brokers tbody tr').length === 2")
    assert "offline" not in page.inner_text("tr[data-broker='2']")

    c[2].stop()
    t0 = time.monotonic()
    # Every partition loses its second replica: 45 under-replicated (the card counts them).
    page.wait_for_function(
        "[...document.querySelectorAll('#cards .card')].some(c => c.innerText.toLowerCase()"
        f".includes('under-replicated') && c.querySelector('.value').innerText === '{PARTITIONS}')",
        timeout=60_000)
    assert time.monotonic() - t0 < 90
    page.wait_for_timeout(2500)  # one more poll of the overview
    # Both facts checked before either fails, so each shows on its own.
    rows = {r.get_attribute("data-broker"): (r.inner_text(), r.get_attribute("class") or "")
            for r in page.query_selector_all("#brokers tbody tr")}
    listed = len(page.query_selector_all("#urp tr.urp"))
    problems = []
    if set(rows) != {"1", "2"} or "offline" not in rows["2"][0]:
        problems.append(f"stopped broker 2 not shown offline: {rows}")
    if listed != 20:
        problems.append(f"{listed} under-replicated rows on one page, not 20")
    assert not problems, problems
    # Broker 2 stays listed, offline, with the address this console saw; 1 leads everything.
    assert "offline" in rows["2"][1] and "online" in rows["1"][0]
    assert "127.0.0.1" in rows["2"][0]
    assert "1 of 2 up" in page.inner_text("[data-card=Brokers]")
    assert page.inner_text(".page-info") == f"1–20 of {PARTITIONS}"
    first = [r.get_attribute("data-urp") for r in page.query_selector_all("#urp tr.urp")]
    shot(page, "issue26-06-cluster-offline-broker")
    page.click("[data-page=next]")
    page.wait_for_selector(f".page-info:text-is('21–40 of {PARTITIONS}')")
    second = [r.get_attribute("data-urp") for r in page.query_selector_all("#urp tr.urp")]
    assert len(second) == 20 and not set(first) & set(second)
    page.wait_for_timeout(2500)  # a poll keeps the page
    assert page.inner_text(".page-info") == f"21–40 of {PARTITIONS}"
    page.click("[data-page=next]")
    page.wait_for_selector(f".page-info:text-is('41–{PARTITIONS} of {PARTITIONS}')")
    assert len(page.query_selector_all("#urp tr.urp")) == PARTITIONS - 40
    assert page.is_disabled("[data-page=next]")
    shot(page, "issue26-07-cluster-urp-last-page")
    page.close()
    assert not errors, errors
