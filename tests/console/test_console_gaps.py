"""Console gaps of issue 26, in headless Chromium against a real broker (an embedded
`yak serve --http`; screenshots in test-artifacts/console/): a filter box and pages on
every list, a dark mode that follows the system, topic creation with any config, a quotas
page and a broker page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from gateway.conftest import start_embedded  # tests/ is on sys.path

from .test_console import browser_context, pytestmark, shot  # noqa: F401


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    gw = start_embedded(tmp_path_factory.mktemp("yak-console-gaps"))
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def admin(served: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": served.bootstrap})


@pytest.fixture(scope="module")
def page(browser_context: Any, served: Any) -> Iterator[Any]:  # noqa: F811
    p = browser_context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    yield p
    p.close()
    assert not errors, errors


def create(admin: AdminClient, *names: str, partitions: int = 1, **configs: str) -> None:
    fs = admin.create_topics([NewTopic(n, partitions, 1, config=configs) for n in names])
    for f in fs.values():
        f.result(30)


def visible_rows(page: Any, table: str) -> list[str]:
    return page.eval_on_selector_all(
        f"#{table} tbody tr", "rs => rs.filter(r => !r.hidden && r.offsetParent !== null)"
        ".map(r => r.dataset.topic || r.dataset.group || r.dataset.acl || r.innerText)")


def test_topics_list_filters_and_pages(page: Any, served: Any, admin: AdminClient) -> None:
    create(admin, *[f"filt-{i:02d}" for i in range(30)], "other-topic")
    page.goto(served.url + "/#/topics")
    page.wait_for_selector("tr[data-topic='other-topic']", state="attached")
    # 31 topics: the first page of 25, and a pager.
    assert len(visible_rows(page, "topics-table")) == 25
    assert "1–25 of 31" in page.inner_text("#list-pages")
    page.click("#list-pages [data-page=next]")
    assert visible_rows(page, "topics-table") == [f"filt-{i:02d}" for i in range(25, 30)] + [
        "other-topic"]
    assert "26–31 of 31" in page.inner_text("#list-pages")
    # Filtering: every word must match; the pager follows the matches.
    page.fill("input[data-filter=list]", "filt-1")
    assert visible_rows(page, "topics-table") == [f"filt-{i}" for i in range(10, 20)]
    assert "10 of 31 match" in page.inner_text("#list-filter")
    assert page.inner_text("#list-pages").strip() == ""
    shot(page, "issue26-10-topics-filter")
    # The list's poll (5 s) redraws the table: the filter and its text stay.
    page.wait_for_timeout(5500)
    assert page.input_value("input[data-filter=list]") == "filt-1"
    assert visible_rows(page, "topics-table") == [f"filt-{i}" for i in range(10, 20)]
    page.fill("input[data-filter=list]", "no such thing")
    assert visible_rows(page, "topics-table") == []
    assert "nothing matches" in page.inner_text("#list-filter")
    page.fill("input[data-filter=list]", "")
    assert len(visible_rows(page, "topics-table")) == 25
    shot(page, "issue26-11-topics-paged")


def test_every_list_has_a_filter(page: Any, served: Any, admin: AdminClient) -> None:
    create(admin, "grouped")
    for gid in ("billing", "shipping"):
        c = Consumer({"bootstrap.servers": served.bootstrap, "group.id": gid})
        c.commit(offsets=[TopicPartition("grouped", 0, 0)], asynchronous=False)
        c.close()
    users = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                                 4096), b"pw-" + u.encode())
             for u in ("alice", "bob")]
    for f in admin.alter_user_scram_credentials(users).values():
        f.result(30)
    # Overview: the brokers table.
    page.goto(served.url + "/")
    page.wait_for_selector("#brokers-table")
    page.fill("input[data-filter=brokers]", "no-such-broker")
    assert visible_rows(page, "brokers-table") == []
    # Groups.
    page.goto(served.url + "/#/groups")
    page.wait_for_selector("tr[data-group=billing]")
    page.fill("input[data-filter=groups]", "ship")
    assert visible_rows(page, "groups-table") == ["shipping"]
    shot(page, "issue26-12-groups-filter")
    # Users.
    page.goto(served.url + "/#/users")
    page.wait_for_selector("tr[data-user=alice]")
    page.fill("input[data-filter=user-list]", "bob")
    assert [r.split()[0] for r in visible_rows(page, "users-table")] == ["bob"]
    shot(page, "issue26-13-users-filter")
    # A topic's partitions, more than a page of them, and its configs.
    create(admin, "many-parts", partitions=40)
    page.goto(served.url + "/#/topic/many-parts")
    page.wait_for_selector("#partitions-table")
    assert len(visible_rows(page, "partitions-table")) == 25
    assert "1–25 of 40" in page.inner_text("#parts-pages")
    page.wait_for_selector("#configs-table")
    page.fill("input[data-filter=configs]", "retention")
    names = page.eval_on_selector_all(
        "#configs-table tbody tr", "rs => rs.filter(r => !r.hidden).map(r => r.cells[0].innerText)")
    assert names and all("retention" in n for n in names), names
    shot(page, "issue26-14-topic-filters")


def background(page: Any, selector: str) -> str:
    return page.eval_on_selector(selector, "el => getComputedStyle(el).backgroundColor")


def test_dark_mode_follows_the_system(browser_context: Any, served: Any,  # noqa: F811
                                     admin: AdminClient) -> None:
    create(admin, "dark-topic")
    page = browser_context.new_page()
    page.emulate_media(color_scheme="dark")
    page.goto(served.url + "/#/topics")
    page.wait_for_selector("#topics-table")
    assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    assert background(page, "body") == "rgb(15, 20, 27)"
    assert background(page, "#topics-table") == "rgb(23, 30, 40)"  # the panels
    assert background(page, "#topics-table th") == "rgb(31, 40, 52)"
    ink = page.eval_on_selector("body", "el => getComputedStyle(el).color")
    assert ink == "rgb(221, 227, 236)"  # light text on the dark ground
    assert background(page, "input[data-filter=list]") == "rgb(15, 21, 29)"
    shot(page, "issue26-20-dark-topics")
    page.goto(served.url + "/")
    page.wait_for_selector("#brokers-table")
    page.wait_for_timeout(2500)  # a chart point
    shot(page, "issue26-21-dark-overview")
    # The system's light setting gives the light page, without a reload.
    page.emulate_media(color_scheme="light")
    assert background(page, "body") == "rgb(246, 247, 249)"
    assert background(page, "#brokers-table") == "rgb(255, 255, 255)"
    page.close()
