"""The group page's offset tools of issue 26, in headless Chromium against a real broker
(an embedded `yak serve --http`; screenshots in test-artifacts/console/): reset a group's
offsets on a topic with a server-side preview that changes nothing, then Apply; delete its
offsets on a topic (OffsetDelete); delete the group; refusals while a member is active."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from gateway.conftest import start_embedded  # tests/ is on sys.path

from .test_console import browser_context, pytestmark, shot  # noqa: F401


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    gw = start_embedded(tmp_path_factory.mktemp("yak-console-group-actions"))
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def page(browser_context: Any, served: Any) -> Iterator[Any]:  # noqa: F811
    p = browser_context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    yield p
    p.close()
    assert not errors, errors


def setup_group(served: Any, topic: str, group: str, commits: dict[int, int]) -> None:
    """A 2-partition topic with 10 records per partition, and `group`'s committed offsets
    on it (committed by a consumer that is then closed: the group is empty)."""
    a = AdminClient({"bootstrap.servers": served.bootstrap})
    a.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": served.bootstrap})
    for part in (0, 1):
        for i in range(10):
            p.produce(topic, value=b"m%d" % i, partition=part)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": served.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in commits.items()],
             asynchronous=False)
    c.close()


def committed(served: Any, group: str, topic: str) -> dict[int, int]:
    """The group's offsets as the broker answers OffsetFetch (confluent-kafka committed())."""
    c = Consumer({"bootstrap.servers": served.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def preview_rows(page: Any) -> dict[int, tuple[str, str]]:
    rows = page.eval_on_selector_all(
        "#reset-table tbody tr", "rs => rs.map(r => [r.dataset.partition, "
        "r.querySelector('.current').innerText, r.querySelector('.new').innerText])")
    return {int(p): (c, n) for p, c, n in rows}


def test_reset_preview_apply_and_delete(page: Any, served: Any) -> None:
    setup_group(served, "ga-t", "ga-g", {0: 3, 1: 5})
    assert committed(served, "ga-g", "ga-t") == {0: 3, 1: 5}
    page.goto(served.url + "/#/group/ga-g")
    page.wait_for_selector("#reset-topic option:text-is('ga-t')", state="attached")
    page.wait_for_selector("#lag-table")

    # Shift by -2: a preview computed by the server, nothing committed.
    page.select_option("#reset-to", "shift")
    page.fill("#reset-value", "-2")
    page.click("#reset-preview")
    page.wait_for_selector("#reset-table")
    assert preview_rows(page) == {0: ("3", "1"), 1: ("5", "3")}
    assert "nothing has changed" in page.inner_text("#reset-status")
    shot(page, "issue26-30-group-reset-preview")
    assert committed(served, "ga-g", "ga-t") == {0: 3, 1: 5}

    # Apply: the broker now answers OffsetFetch with the new offsets.
    page.click("#reset-apply")
    page.wait_for_selector("#reset-status:has-text('Applied')")
    assert committed(served, "ga-g", "ga-t") == {0: 1, 1: 3}
    page.wait_for_selector("#lag-table td.lag:text-is('9')")  # the page follows: 10 - 1
    shot(page, "issue26-31-group-reset-applied")

    # Earliest, latest, an offset (clamped to the log), a timestamp: previews only.
    for to, value, want in [("earliest", None, {0: "0", 1: "0"}),
                            ("latest", None, {0: "10", 1: "10"}),
                            ("offset", "7", {0: "7", 1: "7"}),
                            ("offset", "99", {0: "10", 1: "10"}),
                            ("timestamp", str(int(time.time() * 1000) + 3_600_000),
                             {0: "10", 1: "10"}),
                            ("timestamp", "0", {0: "0", 1: "0"})]:
        page.select_option("#reset-to", to)
        if value is not None:
            page.fill("#reset-value", value)
        page.click("#reset-preview")
        page.wait_for_selector("#reset-apply")
        rows = preview_rows(page)
        assert {p: n for p, (_, n) in rows.items()} == want, (to, value, rows)
        assert {p: c for p, (c, _) in rows.items()} == {0: "1", 1: "3"}
    assert committed(served, "ga-g", "ga-t") == {0: 1, 1: 3}
    page.select_option("#reset-to", "latest")
    page.click("#reset-preview")
    page.wait_for_selector("#reset-apply")
    page.click("#reset-apply")
    page.wait_for_selector("#reset-status:has-text('Applied')")
    assert committed(served, "ga-g", "ga-t") == {0: 10, 1: 10}

    # Delete the group's offsets on the topic (OffsetDelete), after confirming.
    page.once("dialog", lambda d: d.accept())
    page.click("#offsets-delete")
    page.wait_for_selector("#reset-status:has-text('Deleted the offsets')")
    assert committed(served, "ga-g", "ga-t") == {0: -1001, 1: -1001}
    page.wait_for_selector("#lag >> text=No committed offsets.")
    shot(page, "issue26-32-group-offsets-deleted")

    # Dismissing the confirmation deletes nothing.
    page.once("dialog", lambda d: d.dismiss())
    page.click("#group-delete")
    page.wait_for_timeout(500)
    assert "ga-g" in {g["group_id"] for g in httpx.get(f"{served.url}/api/groups",
                                                         timeout=30).json()}
    # Delete the (empty) group: back to the list, where it is gone.
    page.once("dialog", lambda d: d.accept())
    page.click("#group-delete")
    page.wait_for_url("**/#/groups")
    page.wait_for_selector("#groups-table, #groups >> text=No consumer groups.")
    assert "ga-g" not in {g["group_id"] for g in httpx.get(f"{served.url}/api/groups",
                                                             timeout=30).json()}
    shot(page, "issue26-33-group-deleted")


def test_refused_while_a_member_is_active(page: Any, served: Any) -> None:
    setup_group(served, "ga-live", "ga-live-g", {0: 2, 1: 2})
    c = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "ga-live-g",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe(["ga-live"])
    try:
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.5)
        assert c.assignment()
        page.goto(served.url + "/#/group/ga-live-g")
        page.wait_for_selector("#reset-topic option:text-is('ga-live')", state="attached")
        page.select_option("#reset-to", "earliest")
        page.click("#reset-preview")
        page.wait_for_selector("#banner:not([hidden])")
        assert "active member" in page.inner_text("#banner")
        assert page.query_selector("#reset-table") is None
        shot(page, "issue26-34-group-reset-refused")
        # Apply through the API directly: refused too, nothing changed.
        r = httpx.post(f"{served.url}/api/groups/ga-live-g/offsets/reset", timeout=30,
                       json={"topic": "ga-live", "to": "earliest", "apply": True})
        assert r.status_code == 409 and "active member" in r.json()["message"], r.text
        # The broker's own refusals are shown: OffsetDelete on a subscribed topic, and
        # DeleteGroups of a group with members.
        page.once("dialog", lambda d: d.accept())
        page.click("#offsets-delete")
        page.wait_for_function(
            "document.querySelector('#banner').innerText.includes('GROUP_SUBSCRIBED_TO_TOPIC')")
        page.once("dialog", lambda d: d.accept())
        page.click("#group-delete")
        page.wait_for_function(
            "document.querySelector('#banner').innerText.includes('NON_EMPTY_GROUP')")
        shot(page, "issue26-35-group-delete-refused")
        c.poll(0.1)
    finally:
        c.close()
    assert committed(served, "ga-live-g", "ga-live") == {0: 2, 1: 2}
