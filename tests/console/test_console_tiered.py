"""The console's topic page of a tiered topic (issue 25), in headless Chromium on one
`yak serve --http` with a `file://` store: the partitions table gains the leader's local
log start and how far the log is uploaded, the same numbers GET /api/topics/{t} gives and
the broker's files show; a plain topic's table has no such columns."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from gateway.conftest import start_embedded  # tests/ is on sys.path

from tests.tiered.test_broker_tiered import produce

from .test_console import browser_context, pytestmark, shot  # noqa: F401


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("yak-console-tiered")
    store = tmp / "store"
    store.mkdir()
    sets = {"remote.log.storage.system.enable": "true", "remote.storage.uri": f"file://{store}",
            "remote.log.manager.task.interval.ms": "300"}
    gw = start_embedded(tmp, *(a for k, v in sets.items() for a in ("--set", f"{k}={v}")))
    gw.data_dir = tmp / "data"
    yield gw
    gw.stop()


def local_starts(data_dir: Path, topic: str) -> int:
    return min(int(p.stem) for p in (data_dir / f"{topic}-0").glob("*.log"))


def test_topic_page_shows_local_start_and_uploaded_to(browser_context: Any,  # noqa: F811
                                                      served: Any) -> None:
    a = AdminClient({"bootstrap.servers": served.bootstrap})
    for name, cfg in (("tiered-page", {"segment.bytes": str(256 << 10),
                                       "remote.storage.enable": "true",
                                       "local.retention.bytes": str(256 << 10)}),
                      ("plain-page", {})):
        a.create_topics([NewTopic(name, 1, 1, config=cfg)])[name].result(20)
    produce(served, "tiered-page", 0, 2000)  # acks=all, every delivery checked
    deadline = time.monotonic() + 60
    while local_starts(served.data_dir, "tiered-page") < 1000:
        assert time.monotonic() < deadline, "local segments not deleted after upload"
        time.sleep(0.3)

    detail = httpx.get(f"{served.url}/api/topics/tiered-page", timeout=30).json()
    assert detail["tiered"] is True
    (part,) = detail["partitions"]
    local_start = local_starts(served.data_dir, "tiered-page")
    assert part["local_start_offset"] == local_start
    assert local_start <= part["uploaded_upto"] < 2000
    assert part["log_start_offset"] == 0  # the whole log, remote part included

    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(served.url + "/#/topic/tiered-page")
    page.wait_for_selector("#partitions-table tbody tr")
    heads = page.eval_on_selector_all("#partitions-table thead th", "els => els.map(e => "
                                      "e.textContent.trim())")
    cells = page.eval_on_selector_all("#partitions-table tbody tr:first-child td",
                                      "els => els.map(e => e.textContent.trim())")
    row = dict(zip(heads, cells, strict=True))
    assert row["Local start"] == str(part["local_start_offset"])
    assert row["Uploaded to"] == str(part["uploaded_upto"])
    assert row["Log start"] == "0"
    shot(page, "issue25-topic-tiered-columns")

    page.goto(served.url + "/#/topic/plain-page")
    page.wait_for_selector("#partitions-table tbody tr")
    heads = page.eval_on_selector_all("#partitions-table thead th", "els => els.map(e => "
                                      "e.textContent.trim())")
    assert "Local start" not in heads and "Uploaded to" not in heads
    assert httpx.get(f"{served.url}/api/topics/plain-page", timeout=30).json()["tiered"] is False
    page.close()
    assert not errors, errors
