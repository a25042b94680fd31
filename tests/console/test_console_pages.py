"""Console fixes of issue 26, in headless Chromium on one broker (screenshots in
test-artifacts/console/): config values shown whole, no one-click delete of internal
topics, the ACL page saying ACLs are not enforced without an authorizer, topic and
partition counts that agree, an unknown topic's page, and whole-number chart labels."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from gateway.conftest import start_embedded  # tests/ is on sys.path

from .test_console import browser_context, pytestmark, shot  # noqa: F401

LONG_MAX = "9223372036854775807"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    gw = start_embedded(tmp_path_factory.mktemp("yak-console-pages"))
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


def create(served: Any, name: str, partitions: int, **configs: str) -> None:
    a = AdminClient({"bootstrap.servers": served.bootstrap})
    a.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(20)


def test_config_values_are_shown_whole(page: Any, served: Any) -> None:
    create(served, "wide-values", 1, **{"max.compaction.lag.ms": LONG_MAX,
                                        "retention.ms": "604800000"})
    page.goto(served.url + "/#/topic/wide-values")
    page.wait_for_selector("#configs-table input[data-config='retention.ms']")
    for name, value in [("max.compaction.lag.ms", LONG_MAX), ("retention.ms", "604800000"),
                        ("flush.messages", LONG_MAX)]:
        sel = f"input[data-config='{name}']"
        assert page.input_value(sel) == value
        # The whole value is visible: the box is at least as wide as its text.
        fits = page.eval_on_selector(sel, "el => el.scrollWidth <= el.clientWidth")
        assert fits, (name, page.eval_on_selector(
            sel, "el => [el.scrollWidth, el.clientWidth]"))
    shot(page, "issue26-01-config-values")


def test_internal_topics_have_no_one_click_delete(page: Any, served: Any) -> None:
    create(served, "_schemas_like", 1)
    create(served, "plain-topic", 1)
    page.goto(served.url + "/#/topics")
    page.wait_for_selector("tr[data-topic='plain-topic'] button[data-delete]")
    row = page.wait_for_selector("tr[data-topic='_schemas_like']")
    assert row.query_selector("button[data-delete]") is None
    assert "internal" in row.inner_text()
    for name in ("_schemas", "__consumer_offsets"):
        r = page.query_selector(f"tr[data-topic='{name}']")
        if r is not None:
            assert r.query_selector("button[data-delete]") is None, name
    shot(page, "issue26-02-internal-topics")
    # Nor through the console's API, unless the name is confirmed.
    r = httpx.delete(f"{served.url}/api/topics/_schemas_like", timeout=30)
    assert r.status_code == 403 and "internal" in r.json()["message"]
    r = httpx.delete(f"{served.url}/api/topics/_schemas_like?confirm=_schemas_like", timeout=30)
    assert r.status_code == 204


def test_acls_page_says_acls_are_not_enforced(page: Any, served: Any) -> None:
    page.goto(served.url + "/#/acls")
    page.wait_for_function("!document.querySelector('#acl-list').innerText.includes('Loading')")
    page.wait_for_timeout(500)
    assert "ACLs are not enforced" in page.inner_text("#view")
    assert page.inner_text("#acl-list").strip() != "No ACLs."
    shot(page, "issue26-03-acls-not-enforced")


def test_topic_and_partition_counts_agree(page: Any, served: Any) -> None:
    create(served, "counted", 3)
    # A committed offset makes __consumer_offsets (an internal topic, 50 partitions).
    c = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "counting"})
    c.commit(offsets=[TopicPartition("counted", 0, 0)], asynchronous=False)
    c.close()
    topics = httpx.get(f"{served.url}/api/topics", timeout=30).json()
    user = [t for t in topics if not t["internal"]]
    internal = [t for t in topics if t["internal"]]
    assert "__consumer_offsets" in {t["name"] for t in internal}
    page.goto(served.url + "/")
    page.wait_for_selector("#cards .card")
    cards = {c.query_selector(".label").inner_text().lower(): " ".join(
        c.inner_text().split("\n")[1:]) for c in page.query_selector_all("#cards .card")}
    # The two cards count the same topics: partitions of the topics the Topics card counts.
    assert cards["topics"].split()[0] == str(len(user)), cards
    assert cards["partitions"].split()[0] == str(sum(t["partitions"] for t in user)), cards
    # Internal ones are counted apart, on both.
    assert f"+{len(internal)} internal" in cards["topics"], cards
    assert f"+{sum(t['partitions'] for t in internal)} internal" in cards["partitions"], cards
    o = httpx.get(f"{served.url}/api/overview", timeout=30).json()
    assert (o["topics"], o["internal_topics"]) == (len(user), len(internal))


def test_unknown_topic_page(page: Any, served: Any) -> None:
    page.goto(served.url + "/#/topic/no-such-topic")
    page.wait_for_function("!document.querySelector('#view').innerText.includes('Loading')",
                           timeout=15_000)
    assert "does not exist" in page.inner_text("#view")
    assert "Loading" not in page.inner_text("#view")
    assert page.query_selector("#produce") is None
    assert page.query_selector("#browse") is None
    shot(page, "issue26-04-unknown-topic")
    # Nothing was created by looking.
    topics = {t["name"] for t in httpx.get(f"{served.url}/api/topics", timeout=30).json()}
    assert "no-such-topic" not in topics


# Every text drawn on a canvas, recorded as the page draws it.
RECORD_CANVAS_TEXT = """
window.__drawn = [];
const fillText = CanvasRenderingContext2D.prototype.fillText;
CanvasRenderingContext2D.prototype.fillText = function (text, ...rest) {
  window.__drawn.push([this.canvas.id, String(text)]);
  return fillText.call(this, text, ...rest);
};
"""


def test_throughput_chart_labels_whole_numbers(browser_context: Any,  # noqa: F811
                                              served: Any) -> None:
    page = browser_context.new_page()
    page.add_init_script(RECORD_CANVAS_TEXT)
    page.goto(served.url + "/")
    page.wait_for_selector("#tput")
    page.wait_for_timeout(2500)  # a second poll: a rate point (idle cluster: 0 messages/s)
    drawn = page.evaluate("window.__drawn.filter(([id]) => id === 'tput').map(([, t]) => t)")
    labels = [t for t in drawn[-7:] if t[0].isdigit()]  # the last draw: 5 labels, -120s, now
    assert len(labels) == 5 and labels[0] == "0", drawn[-7:]
    assert all("." not in t for t in labels), labels  # messages are counted in whole numbers
    assert page.get_attribute("#tput", "data-ticks") == ",".join(labels)
    shot(page, "issue26-05-chart")
    page.close()
