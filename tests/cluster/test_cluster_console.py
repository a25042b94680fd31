"""The web console of a cluster broker, in headless Chromium: brokers with the controller,
leaders and replicas per broker, partition leaders and ISR, and the under-replicated
partitions after a broker dies; and the same facts in the brokers' /metrics."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.test_cluster_metadata import _metadata, _wait
from tests.conftest import REPO

CHROMIUM = os.environ.get("YAK_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "console"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists(),
                                reason="chromium is not installed (apt-get install chromium)")


def _scrape(http: str) -> dict[str, float]:
    """Unlabelled samples of a broker's /metrics."""
    # A scrape took 1.4-3.7 s at load 11-12: the bound is for a hang, not a timing.
    text = httpx.get(f"http://{http}/metrics", timeout=20).text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_console_and_metrics_show_brokers_controller_isr_and_under_replicated(
        cluster_factory, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    c = cluster_factory(3, http=True)
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("ui", 3, 3)])["ui"].result(20)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(30):
        p.produce("ui", b"%d" % i)
    assert p.flush(20) == 0
    controller = _metadata(c[1].bootstrap, "ui")[1]
    before = _metadata(c[1].bootstrap, "ui")[2]
    victim = next(n for n in (3, 2) if n != controller)
    c[victim].kill()
    _wait(lambda: all(victim not in x[4] for x in _metadata(c[1].bootstrap, "ui")[2]), 20,
          f"broker {victim} out of the ISRs")
    # /metrics of the brokers left: one controller, its elections, the URPs their leaders see.
    live = [n for n in (1, 2, 3) if n != victim]
    scraped = {n: _scrape(c[n].http) for n in live}
    assert all(m["yak_registered_brokers"] == 2 for m in scraped.values())
    assert sum(m["yak_controller_active"] for m in scraped.values()) == 1
    assert scraped[controller]["yak_controller_active"] == 1
    led_by_victim = sum(1 for x in before if x[1] == victim)
    assert scraped[controller]["yak_controller_leader_elections_total"] >= led_by_victim
    assert sum(m["yak_under_replicated_partitions"] for m in scraped.values()) == 3
    assert sum(m["yak_leader_partitions"] for m in scraped.values()) == 3
    assert all(m["yak_offline_partitions"] == 0 for m in scraped.values())
    viewer = next(n for n in (1, 2) if n != victim)
    url = f"http://{c[viewer].http}/"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1280, "height": 900})
        ctx.set_default_timeout(30_000)
        try:
            page: Any = ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("text=Cluster overview")
            # A stopped broker stays in the table, marked offline (issue 26).
            page.wait_for_function(
                "document.querySelectorAll('#brokers tbody tr').length === 3 && "
                "document.querySelector('#brokers tbody').innerText.includes('offline')")
            rows = {r.get_attribute("data-broker"): r.inner_text()
                    for r in page.query_selector_all("#brokers tbody tr")}
            assert set(rows) == {"1", "2", "3"}
            assert "offline" in rows[str(victim)]
            assert all("offline" not in rows[str(n)] for n in (1, 2, 3) if n != victim)
            assert "controller" in rows[str(controller)]
            page.wait_for_selector("tr[data-urp='ui-0']")
            urp = [r.get_attribute("data-urp") for r in page.query_selector_all("#urp tr.urp")]
            assert {"ui-0", "ui-1", "ui-2"} <= set(urp)
            cards = page.inner_text("#cards")
            assert "UNDER-REPLICATED" in cards.upper()
            page.screenshot(path=str(ARTIFACTS / "cluster-01-overview.png"), full_page=True)
            page.goto(url + "#/topic/ui")
            page.wait_for_selector("#partitions-table tbody tr")
            parts = page.query_selector_all("#partitions-table tbody tr")
            assert len(parts) == 3
            for r in parts:
                assert "urp" in (r.get_attribute("class") or "")
                cells = [td.inner_text() for td in r.query_selector_all("td")]
                assert str(victim) in cells[2] and str(victim) not in cells[3]
            page.screenshot(path=str(ARTIFACTS / "cluster-02-topic.png"), full_page=True)
            assert errors == []
        finally:
            ctx.close()
