"""The console's Reassignments page and broker racks (issue 23), in headless Chromium, on a
3-broker cluster in racks a, b, c: a partition moved from broker 1 to broker 2 under a
50 KB/s follower throttle stays in progress and is shown with its adding and removing
sets, the bytes left, the copy rate and the throttles in force; a stopped broker that
still holds replicas stays in the brokers table, offline, with its rack; once the
throttle is lifted the move finishes and the page says nothing moves. The topic's page
marks the moving partition and links to the Reassignments page.
Screenshots in test-artifacts/console/."""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

# The cluster fixtures (a real etcd and `yak serve --metadata etcd://...` brokers).
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401
from tests.cluster.test_reassignment import _alter_raw, _list_raw
from tests.waiting import wait_until

from .test_console import browser_context, pytestmark, shot  # noqa: F401

T = 20
RATE = 50_000  # bytes/s: 1.5 MB take about 30 s
RACKS = {1: "a", 2: "b", 3: "c"}


def _throttle(admin: AdminClient, rate: int | None) -> None:
    """Broker 2's follower.replication.throttled.rate (None: removed)."""
    res = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[ConfigEntry(
        "follower.replication.throttled.rate", None if rate is None else str(rate),
        incremental_operation=AlterConfigOpType.SET if rate else AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(T)


def _bytes(text: str) -> float:
    """'48.8 KiB/s', '1.2 MiB' (the console's fmtBytes) in bytes."""
    m = re.match(r"([\d.]+) (B|KiB|MiB|GiB)", text)
    assert m, text
    return float(m.group(1)) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(m.group(2))


@pytest.mark.slow
def test_reassignment_in_progress_racks_and_an_offline_broker(
        browser_context: Any, cluster_factory: Any) -> None:  # noqa: F811
    c = cluster_factory(0, http=True)
    for i, rack in RACKS.items():
        c.add(i, **{"broker.rack": rack})
    c.wait_registered()
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    fs = admin.create_topics([
        NewTopic("mv", 1, replica_assignment=[[1]],
                 config={"follower.replication.throttled.replicas": "0:2"}),
        NewTopic("held", 1, replica_assignment=[[3, 1]])])
    for f in fs.values():
        f.result(T)
    value = os.urandom(10_000)
    p = Producer({"bootstrap.servers": c[1].bootstrap, "acks": "all", "batch.size": 20_000})
    for _ in range(150):
        p.produce("mv", value)
        p.poll(0)
    assert p.flush(60) == 0
    _throttle(admin, RATE)

    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"http://{c[1].http}/")
    page.wait_for_function("document.querySelectorAll('#brokers tbody tr').length === 3")
    page.wait_for_function("document.querySelector(\"tr[data-broker='3'] .rack\")"
                           ".innerText === 'c'")
    racks = {b: page.inner_text(f"tr[data-broker='{b}'] .rack") for b in RACKS}
    assert racks == RACKS, racks

    # Broker 3 stops; it still holds held-0's first replica, so it stays listed, offline,
    # with the rack it had.
    c[3].stop()
    page.wait_for_function("(document.querySelector(\"tr[data-broker='3']\")||{}).className"
                           " === 'offline'", timeout=60_000)
    row = page.inner_text("tr[data-broker='3']")
    assert "offline" in row and page.inner_text("tr[data-broker='3'] .rack") == "c", row
    shot(page, "issue23-01-racks-and-offline-broker")

    assert _alter_raw(c[1].bootstrap, {("mv", 0): [2]}) == {("mv", 0): 0}
    started = time.monotonic()
    # The overview counts the moving partitions.
    page.wait_for_function("(document.querySelector('[data-card=Reassignments] .value')||{})"
                           ".innerText === '1'")
    page.click("[data-nav=reassignments]")
    page.wait_for_selector("tr[data-move='mv-0']")
    # The rate needs two looks at the adding replica's size: the page polls every 3 s.
    page.wait_for_function("(document.querySelector(\"tr[data-move='mv-0'] .rate\")||{})"
                           ".innerText?.endsWith('/s')", timeout=30_000)
    row = "tr[data-move='mv-0']"
    seen = {"adding": page.inner_text(f"{row} .adding"),
            "removing": page.inner_text(f"{row} .removing"),
            "left": page.inner_text(f"{row} .bytes-left"),
            "rate": page.inner_text(f"{row} .rate"),
            "copy": page.inner_text(f"{row} [data-adding='2']"),
            "follower rate 2": page.inner_text("tr[data-throttle-broker='2'] .follower-rate"),
            "follower rate 1": page.inner_text("tr[data-throttle-broker='1'] .follower-rate"),
            "throttled replicas": page.inner_text(f"{row} td:last-child"),
            "listed": _list_raw(c[1].bootstrap)}
    print(seen, f"{time.monotonic() - started:.1f} s into the move")
    assert seen["listed"] == {("mv", 0): ((2, 1), (2,), (1,))}, seen  # still moving
    assert seen["adding"] == "2" and seen["removing"] == "1", seen
    assert _bytes(seen["left"]) > 0, seen
    # The copy's rate over one poll (3 s): about the throttle's 50 KB/s.
    assert 0 < _bytes(seen["rate"]) < 3 * RATE, seen
    assert seen["follower rate 2"] == "48.8 KiB/s", seen
    assert seen["follower rate 1"] == "unthrottled", seen
    assert "follower: 0:2" in seen["throttled replicas"], seen
    assert "broker 2" in seen["copy"] and " of " in seen["copy"], seen
    shot(page, "issue23-02-reassignment-in-progress")
    # The topic's page marks the moving partition with its target.
    page.goto(f"http://{c[1].http}/#/topic/mv")
    page.wait_for_selector("#partitions-table a.moving")
    mark = page.inner_text("#partitions-table a.moving")
    assert mark == "moving → 2", mark
    assert "adding 2, removing 1" in page.get_attribute("#partitions-table a.moving", "title")
    page.click("#partitions-table a.moving")
    page.wait_for_selector("tr[data-move='mv-0']")

    # Lifting the throttle lets the move finish; the page then lists none.
    _throttle(admin, None)
    wait_until(lambda: _list_raw(c[1].bootstrap) == {}, 60, "mv-0 moved")
    page.wait_for_selector("#reassignments-empty", timeout=30_000)
    page.close()
    assert not errors, errors
