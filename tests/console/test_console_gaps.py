"""Console gaps of issue 26, in headless Chromium against a real broker (an embedded
`yak serve --http`; screenshots in test-artifacts/console/): a filter box and pages on
every list, a dark mode that follows the system, topic creation with any config, a quotas
page and a broker page."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from gateway.conftest import REPO, start_embedded  # tests/ is on sys.path

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


def topic_configs(admin: AdminClient, name: str) -> dict[str, Any]:
    res = ConfigResource(ResourceType.TOPIC, name)
    entries = admin.describe_configs([res])[res].result(30)
    return {k: e for k, e in entries.items()}


def test_create_topic_with_any_config(page: Any, served: Any, admin: AdminClient) -> None:
    page.goto(served.url + "/#/topics")
    page.wait_for_selector("#create")
    page.fill("#create input[name=name]", "configured")
    page.fill("#create input[name=partitions]", "3")
    page.click("#add-config")
    page.fill("#create-configs .config-row:nth-child(1) .config-key", "cleanup.policy")
    page.fill("#create-configs .config-row:nth-child(1) .config-val", "compact")
    page.click("#add-config")
    # "key=value" in the name box is split into the two boxes.
    page.type("#create-configs .config-row:nth-child(2) .config-key", "max.message.bytes=2097152")
    assert page.input_value("#create-configs .config-row:nth-child(2) .config-key") == \
        "max.message.bytes"
    assert page.input_value("#create-configs .config-row:nth-child(2) .config-val") == "2097152"
    page.click("#add-config")
    page.fill("#create-configs .config-row:nth-child(3) .config-key", "retention.ms")
    page.fill("#create-configs .config-row:nth-child(3) .config-val", "3600000")
    page.click("#add-config")  # an empty row is left out
    shot(page, "issue26-30-create-with-configs")
    page.click("#create button[type=submit]")
    page.wait_for_selector("tr[data-topic=configured]")
    assert page.query_selector_all("#create-configs .config-row") == []  # the form is reset
    cfg = topic_configs(admin, "configured")
    assert cfg["cleanup.policy"].value == "compact" and not cfg["cleanup.policy"].is_default
    assert cfg["max.message.bytes"].value == "2097152"
    assert cfg["retention.ms"].value == "3600000"
    row = page.inner_text("tr[data-topic=configured]")
    assert "compact" in row and "1 h" in row, row
    md = admin.list_topics("configured", timeout=10)
    assert len(md.topics["configured"].partitions) == 3
    # A config given twice, or a value with no name, is refused before anything is sent.
    page.fill("#create input[name=name]", "twice")
    for key in ("retention.ms", "retention.ms"):
        page.click("#add-config")
        page.fill("#create-configs .config-row:last-child .config-key", key)
        page.fill("#create-configs .config-row:last-child .config-val", "1000")
    page.click("#create button[type=submit]")
    page.wait_for_selector("#banner:not([hidden])")
    assert "retention.ms is given twice" in page.inner_text("#banner")
    # The broker's own refusal (a value it does not accept) is shown as it says it.
    page.click("#create-configs .config-row:last-child [data-remove-config]")
    page.fill("#create-configs .config-row:last-child .config-val", "not-a-number")
    page.click("#create button[type=submit]")
    page.wait_for_function(
        "!document.querySelector('#banner').innerText.includes('given twice')"
        " && !document.querySelector('#banner').hidden")
    assert "INVALID_CONFIG" in page.inner_text("#banner")
    assert "retention.ms" in page.inner_text("#banner")
    shot(page, "issue26-31-create-refused")
    assert "twice" not in admin.list_topics(timeout=10).topics


def yak(*args: str) -> str:
    r = subprocess.run([str(REPO / ".venv" / "bin" / "yak"), *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_quotas_page(page: Any, served: Any) -> None:
    # One quota set with the CLI (AlterClientQuotas), shown by the page.
    yak("quota", "set", "--bootstrap", served.bootstrap, "--user", "bob", "--client-id", "etl",
        "request_percentage=50")
    page.goto(served.url + "/#/quotas")
    page.wait_for_selector("a[data-nav=quotas].active")
    row = page.wait_for_selector("tr[data-quota='client id etl, user bob']")
    assert row.query_selector("td[data-key=request_percentage]").inner_text() == "50 %"
    # Set from the page: a user's byte rate and the default user's.
    page.fill("#quota-set input[name=user]", "alice")
    page.select_option("#quota-set select[name=key]", "producer_byte_rate")
    page.fill("#quota-set input[name=value]", "1048576")
    page.click("#quota-set button[type=submit]")
    row = page.wait_for_selector("tr[data-quota='user alice']")
    assert row.query_selector("td[data-key=producer_byte_rate]").inner_text() == "1.0 MiB/s"
    page.fill("#quota-set input[name=user]", "<default>")
    page.select_option("#quota-set select[name=key]", "consumer_byte_rate")
    page.fill("#quota-set input[name=value]", "2097152")
    page.click("#quota-set button[type=submit]")
    page.wait_for_selector("tr[data-quota='user <default>']")
    listed = {json.dumps(q["entity"], sort_keys=True): q["quotas"] for q in json.loads(
        yak("quota", "list", "--bootstrap", served.bootstrap, "--format", "json"))}
    assert listed['{"user": "alice"}'] == {"producer_byte_rate": 1048576.0}
    assert listed['{"user": null}'] == {"consumer_byte_rate": 2097152.0}
    api = httpx.get(f"{served.url}/api/quotas", timeout=30).json()
    assert {"entity": {"user": "alice"}, "quotas": {"producer_byte_rate": 1048576}} in api["quotas"]
    # Nameless or unknown entries are refused in one line.
    page.fill("#quota-set input[name=user]", "")
    page.fill("#quota-set input[name=value]", "100")
    page.click("#quota-set button[type=submit]")
    page.wait_for_selector("#banner:not([hidden])")
    assert "name a user, a client id, or both" in page.inner_text("#banner")
    r = httpx.post(f"{served.url}/api/quotas", json={"entity": {"user": "x"},
                                                      "quotas": {"bogus_rate": 1}}, timeout=30)
    assert r.status_code == 422 and "bogus_rate" in r.json()["message"]
    # A boolean is no rate (pydantic's lax mode alone would read `true` as 1 byte/s).
    r = httpx.post(f"{served.url}/api/quotas", json={
        "entity": {"user": "x"}, "quotas": {"producer_byte_rate": True}}, timeout=30)
    assert r.status_code == 422 and "not a boolean" in r.json()["message"]
    api = httpx.get(f"{served.url}/api/quotas", timeout=30).json()
    assert {"user": "x"} not in [q["entity"] for q in api["quotas"]]
    page.fill("input[data-filter=quota-list]", "alice")
    assert len(visible_rows(page, "quotas-table")) == 1
    page.fill("input[data-filter=quota-list]", "")
    shot(page, "issue26-40-quotas")
    # Remove: every key of the entity.
    page.once("dialog", lambda d: d.accept())
    page.click("tr[data-quota='user alice'] [data-remove-quota]")
    page.wait_for_selector("tr[data-quota='user alice']", state="detached")
    listed = json.loads(yak("quota", "list", "--bootstrap", served.bootstrap, "--format", "json"))
    assert {"user": "alice"} not in [q["entity"] for q in listed]


def test_broker_page(page: Any, served: Any, admin: AdminClient) -> None:
    from confluent_kafka import Producer

    create(admin, "on-broker", partitions=3)
    p = Producer({"bootstrap.servers": served.bootstrap})
    for i in range(30):
        p.produce("on-broker", f"v{i}".encode() * 20, partition=i % 3)
    assert p.flush(30) == 0
    md = admin.list_topics(timeout=10)
    (bid,) = md.brokers
    page.goto(served.url + "/")
    page.click(f"#brokers-table tr[data-broker='{bid}'] a")
    page.wait_for_selector("#led-table")
    assert page.url.endswith(f"#/broker/{bid}")
    assert page.get_attribute("a[data-nav=overview]", "class") == "active"
    cards = {c.query_selector(".label").inner_text().lower(): c.query_selector(".value").inner_text()
             for c in page.query_selector_all("#broker-cards .card")}
    assert cards["status"] == "online" and cards["role"] == "controller", cards
    d = httpx.get(f"{served.url}/api/brokers/{bid}", timeout=30).json()
    led = sorted((t, p) for t, tm in md.topics.items() for p, pm in tm.partitions.items()
                 if pm.leader == bid)
    assert sorted((r["topic"], r["partition"]) for r in d["led"]) == led
    assert d["followed"] == [] and cards["leaders"] == str(len(led))
    # Log dirs: the broker's directory, with the partitions it holds and their bytes.
    (ld,) = d["log_dirs"]
    assert ld["error_code"] == 0 and ld["total_bytes"] > 0
    sizes = {(r["topic"], r["partition"]): r["size"] for r in ld["partitions"]}
    assert all(sizes[("on-broker", i)] > 0 for i in range(3)), sizes
    assert page.query_selector(f"#log-dirs-table tr[data-log-dir='{ld['path']}']") is not None
    # Partitions led, filtered to one topic.
    page.fill("input[data-filter=led]", "on-broker")
    assert visible_rows(page, "led-table") == [f"on-broker\t{i}\t{bid}\t{bid}\t{bid}\tin sync"
                                               for i in range(3)]
    # Configs: every broker setting, non-default ones first, with their source.
    page.wait_for_selector("#broker-configs-table")
    names = {c["name"]: c for c in d["configs"]}
    assert "log.retention.hours" in names or "log.retention.ms" in names, list(names)[:20]
    first = page.eval_on_selector("#broker-configs-table tbody tr", "r => r.className")
    assert first == "non-default" or all(c["is_default"] for c in d["configs"])
    assert names["log.dirs"]["source"] == "STATIC_BROKER_CONFIG", names["log.dirs"]
    page.fill("input[data-filter=broker-configs]", "authorizer.class.name")
    rows = visible_rows(page, "broker-configs-table")
    assert len(rows) == 1 and rows[0].startswith("authorizer.class.name"), rows
    page.fill("input[data-filter=broker-configs]", "")
    shot(page, "issue26-50-broker")
    # An unknown broker says so.
    assert httpx.get(f"{served.url}/api/brokers/999", timeout=30).status_code == 404
    page.goto(served.url + "/#/broker/999")
    page.wait_for_selector("#broker-missing")
    assert "not in this cluster" in page.inner_text("#broker-missing")
    shot(page, "issue26-51-unknown-broker")


def test_browse_all_partitions_from_a_timestamp(page: Any, served: Any,
                                                admin: AdminClient) -> None:
    from datetime import UTC, datetime

    from confluent_kafka import Producer

    # Kept forever: records of 2026-01-01 are older than the default 7 days' retention.
    create(admin, "spread", partitions=3, **{"retention.ms": "-1"})
    base = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    p = Producer({"bootstrap.servers": served.bootstrap})
    for i in range(12):  # record i at base + i s, on partition i % 3
        p.produce("spread", f'{{"n": {i}}}'.encode(), key=f"k{i}".encode(), partition=i % 3,
                  timestamp=base + i * 1000)
    assert p.flush(30) == 0
    record = {i: f"{i % 3}-{i // 3}" for i in range(12)}  # partition-offset of record i

    def load(mode: str, at: str = "", limit: str = "50") -> list[str]:
        page.select_option("#browse select[name=partition]", "all")
        page.select_option("#browse select[name=mode]", mode)
        page.fill("#browse input[name=at]", at)
        page.fill("#browse input[name=limit]", limit)
        page.evaluate("document.getElementById('messages').innerHTML = ''")
        page.click("#browse button[type=submit]")
        page.wait_for_function("document.querySelector('#messages-table.all-partitions')"
                               " || !document.getElementById('banner').hidden")
        assert page.is_hidden("#banner"), page.inner_text("#banner")
        return page.eval_on_selector_all("#messages-table tbody tr",
                                         "rs => rs.map(r => r.dataset.record)")

    page.goto(served.url + "/#/topic/spread")
    page.wait_for_selector("#browse select[name=partition] option[value=all]", state="attached")
    at = datetime.fromtimestamp((base + 6000) / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # From a timestamp: records 6..11 of all three partitions, in time order.
    assert load("timestamp", at) == [record[i] for i in range(6, 12)]
    header = page.eval_on_selector_all("#messages-table th", "hs => hs.map(h => h.innerText)")
    assert header[:3] == ["Partition", "Offset", "Timestamp"], header
    first = page.inner_text("#messages-table tbody tr:first-child")
    assert "2026-01-01T00:00:06.000Z" in first and '"n": 6' in first, first
    shot(page, "issue26-60-browse-all-from-timestamp")
    assert load("timestamp", at, limit="2") == [record[6], record[7]]
    # The latest and the earliest records across partitions.
    assert load("latest", limit="4") == [record[i] for i in range(8, 12)]
    assert load("earliest", limit="3") == [record[i] for i in range(3)]
    # After the last record: none, said so.
    page.fill("#browse input[name=at]", "2030-01-01T00:00:00Z")
    page.select_option("#browse select[name=mode]", "timestamp")
    page.click("#browse button[type=submit]")
    page.wait_for_selector("#messages >> text=No messages in any of the 3 partitions")
    # An offset means nothing across partitions: refused in one line.
    page.select_option("#browse select[name=mode]", "offset")
    page.fill("#browse input[name=at]", "3")
    page.click("#browse button[type=submit]")
    page.wait_for_selector("#banner:not([hidden])")
    assert "seek by timestamp" in page.inner_text("#banner")
    # One partition, as before.
    page.select_option("#browse select[name=partition]", "1")
    page.select_option("#browse select[name=mode]", "earliest")
    page.fill("#browse input[name=limit]", "50")
    page.click("#browse button[type=submit]")
    page.wait_for_selector("#messages-table:not(.all-partitions)")
    rows = page.eval_on_selector_all("#messages-table tbody tr", "rs => rs.map(r => r.dataset.record)")
    assert rows == [f"1-{o}" for o in range(4)]
