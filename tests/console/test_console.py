"""The web console in headless Chromium (Debian's /usr/bin/chromium driven by Playwright).

Screenshots of every step are kept in test-artifacts/console/ for people to look at.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from gateway.conftest import REPO, start_embedded, start_standalone  # tests/ is on sys.path

CHROMIUM = os.environ.get("YAK_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "console"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists(),
                                reason="chromium is not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1280, "height": 900},
        )
        ctx.set_default_timeout(30_000)
        yield ctx
        ctx.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    gw = start_embedded(tmp_path_factory.mktemp("yak-console"))
    yield gw
    gw.stop()


def shot(page: Any, name: str) -> None:
    page.wait_for_timeout(300)  # let the live chart draw its latest point
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_console_topics_messages_and_group_lag(browser_context: Any, served: Any) -> None:
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    # The overview loads with live data from the cluster.
    page.goto(served.url + "/")
    page.wait_for_selector("text=Cluster overview")
    page.wait_for_selector("#health.up")
    page.wait_for_selector("#cards .card")
    page.wait_for_function("document.querySelectorAll('#brokers tbody tr').length === 1")
    page.wait_for_timeout(2500)  # two overview polls: the chart has a rate point
    shot(page, "01-overview")

    # Create a topic from the form: it appears in the list.
    page.click("a[data-nav=topics]")
    page.fill("#create input[name=name]", "console-t")
    page.fill("#create input[name=partitions]", "2")
    page.click("#create button[type=submit]")
    row = page.wait_for_selector("tr[data-topic='console-t']")
    assert "2" in row.inner_text()
    shot(page, "02-topics")

    # Creating it again shows the broker's error readably.
    page.fill("#create input[name=name]", "console-t")
    page.click("#create button[type=submit]")
    page.wait_for_selector("#banner:not([hidden])")
    assert "already exists" in page.inner_text("#banner").lower()

    # Produce a message from the topic page: the browser shows it as JSON, with headers.
    page.click("a[href='#/topic/console-t']")
    page.wait_for_selector("#partitions-table")
    page.fill("#produce input[name=partition]", "1")
    page.fill("#produce input[name=key]", "k1")
    page.fill("#produce textarea[name=value]", '{"hello": "yak", "n": 1}')
    page.fill("#produce input[name=headers]", '{"source": "console-test"}')
    page.click("#produce button[type=submit]")
    page.wait_for_selector("text=Written to partition 1 at offset 0")
    page.select_option("#browse select[name=partition]", "1")
    page.click("#browse button[type=submit]")
    table = page.wait_for_selector("#messages-table")
    text = table.inner_text()
    assert '"hello": "yak"' in text and "k1" in text and "source: console-test" in text
    page.wait_for_function(
        "[...document.querySelectorAll('#partitions-table tbody tr')]"
        ".some(r => r.cells[0].innerText === '1' && r.cells[6].innerText === '1')")
    shot(page, "03-topic-messages")
    # Edit a topic config: saved through IncrementalAlterConfigs, no longer a default.
    page.fill("input[data-config='retention.ms']", "7200000")
    page.click("#save-configs")
    page.wait_for_selector("#config-status:text-is('Saved retention.ms')")
    row = page.locator("#configs-table tr", has=page.locator("input[data-config='retention.ms']"))
    assert row.locator("td").nth(2).inner_text() != "default"
    assert page.input_value("input[data-config='retention.ms']") == "7200000"
    page.select_option("#browse select[name=fmt]", "hex")
    page.click("#browse button[type=submit]")
    page.wait_for_selector("#messages-table >> text=7b 22 68 65")  # '{"he' in hex

    # A consumer group that committed 3 of 10 messages shows a lag of 7.
    p = Producer({"bootstrap.servers": served.bootstrap})
    for i in range(10):
        p.produce("console-t", value=b"m%d" % i, partition=0)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "console-g",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("console-t", 0, 0)])
    c.commit(offsets=[TopicPartition("console-t", 0, 3)], asynchronous=False)
    c.close()
    page.click("a[data-nav=groups]")
    page.wait_for_selector("tr[data-group='console-g'] td.lag:text-is('7')")
    shot(page, "04-groups")
    page.click("a[href='#/group/console-g']")
    page.wait_for_selector("#lag-table td.lag:text-is('7')")
    shot(page, "05-group-lag")

    # Delete a topic from the list (after confirming): it disappears.
    page.click("a[data-nav=topics]")
    page.fill("#create input[name=name]", "console-doomed")
    page.click("#create button[type=submit]")
    page.wait_for_selector("tr[data-topic='console-doomed']")
    page.once("dialog", lambda d: d.accept())
    page.click("button[data-delete='console-doomed']")
    page.wait_for_selector("tr[data-topic='console-doomed']", state="detached")
    assert page.query_selector("tr[data-topic='console-t']") is not None
    assert not errors, errors


def test_console_shows_a_dead_broker(browser_context: Any, broker_factory: Any,
                                     tmp_path: Path) -> None:
    broker = broker_factory()
    gw = start_standalone(tmp_path / "gw", broker.bootstrap, "--request-timeout", "2")
    try:
        page = browser_context.new_page()
        page.goto(gw.url + "/#/topics")
        page.wait_for_selector("#health.up")
        broker.kill()
        t0 = time.monotonic()
        page.wait_for_selector("#health.down")
        page.wait_for_selector("#banner:not([hidden])")
        assert "unreachable" in page.inner_text("#banner").lower()
        assert time.monotonic() - t0 < 20
        assert page.inner_text("#view").strip()  # the page is not blank
        shot(page, "06-dead-broker")
    finally:
        with contextlib.suppress(Exception):
            gw.stop()
