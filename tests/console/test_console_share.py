"""The Share groups pages in headless Chromium against `yak serve --http` (screenshots in
test-artifacts/console/): the group listed, its member, per partition the start offset,
lag, records in flight and acquired, the in-flight histogram by delivery count and the
dead-letter topic, while an explicit-ack ShareConsumer holds records; then the API of a
group that does not exist."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from gateway.conftest import start_embedded  # tests/ is on sys.path

from .test_console import browser_context, pytestmark, shot  # noqa: F401


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    gw = start_embedded(tmp_path_factory.mktemp("yak-console-share"))
    yield gw
    gw.stop()


def test_share_group_page(browser_context: Any, served: Any) -> None:  # noqa: F811
    bs = served.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for t, n in (("jobs", 2), ("jobs-dlq", 1)):
        admin.create_topics([NewTopic(t, n, 1)])[t].result(20)
    res = ConfigResource(ResourceType.GROUP, "workers", incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in (
            ("share.auto.offset.reset", "earliest"),
            ("errors.deadletterqueue.topic.name", "jobs-dlq"))])
    admin.incremental_alter_configs([res])[res].result(10)
    p = Producer({"bootstrap.servers": bs})
    for i in range(8):
        p.produce("jobs", b"job-%d" % i, partition=i % 2)
    assert p.flush(15) == 0

    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "workers", "client.id": "worker-1",
                       "share.acknowledgement.mode": "explicit"})
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        c.subscribe(["jobs"])
        got: dict[tuple[int, int], Any] = {}
        end = time.monotonic() + 30
        while len(got) < 8 and time.monotonic() < end:
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                got[(m.partition(), m.offset())] = m
        assert len(got) == 8
        # partition 0: all four accepted; partition 1: 0 and 1 accepted, 2 and 3 held
        for (part, off), m in sorted(got.items()):
            if part == 0 or off < 2:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()

        page.goto(served.url + "/#/share-groups")
        page.wait_for_selector("a[data-nav='share-groups'].active")
        row = page.wait_for_selector("tr[data-share-group='workers']")
        assert "Stable" in row.inner_text()
        shot(page, "share-01-groups")
        row.query_selector("a").click()
        page.wait_for_selector("#share-partitions-table")
        page.wait_for_function(
            "document.querySelector(\"tr[data-tp='jobs-1'] .in-flight\")?.textContent === '2'")

        def cell(tp: str, cls: str) -> str:
            return page.inner_text(f"tr[data-tp='{tp}'] .{cls}").strip()

        assert (cell("jobs-0", "start"), cell("jobs-0", "lag"), cell("jobs-0", "in-flight"),
                cell("jobs-0", "acquired")) == ("4", "0", "0", "0")
        assert (cell("jobs-1", "start"), cell("jobs-1", "lag"), cell("jobs-1", "in-flight"),
                cell("jobs-1", "acquired")) == ("2", "2", "2", "2")
        assert "worker-1" in page.inner_text("#share-members-table")
        assert page.inner_text("[data-card='Dead-letter topic'] .value").strip() == "jobs-dlq"
        assert page.inner_text("[data-card='Total lag'] .value").strip() == "2"
        hist = page.inner_text("#delivery-histogram tr[data-delivery-count='1']").split()
        assert hist[:2] == ["1", "2"], hist
        shot(page, "share-02-group")
    finally:
        c.close()
        page.close()
    assert not errors, errors
    r = httpx.get(f"{served.url}/api/share-groups/nobody", timeout=30)
    assert r.status_code == 404 and r.json()["message"].startswith("Share group not found"), r.text
