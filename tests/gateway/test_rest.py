"""REST Proxy v2 round trips against `yak serve --http` (real broker, real HTTP)."""

from __future__ import annotations

import base64
import threading
import time
from typing import Any

import httpx
import pytest

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"


def create_topic(http: httpx.Client, name: str, partitions: int = 1) -> None:
    r = http.post("/api/topics", json={"name": name, "partitions": partitions})
    assert r.status_code == 201, r.text


def new_consumer(http: httpx.Client, group: str, fmt: str = "json", **extra: Any) -> str:
    body = {"format": fmt, "auto.offset.reset": "earliest", **extra}
    r = http.post(f"/consumers/{group}", json=body, headers={"content-type": V2})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["base_uri"].endswith(f"/consumers/{group}/instances/{data['instance_id']}")
    return f"/consumers/{group}/instances/{data['instance_id']}"


def poll_until(http: httpx.Client, base: str, n: int, accept: str = JSON_V2,
               deadline_s: float = 20.0) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < n and time.monotonic() < deadline:
        r = http.get(f"{base}/records", params={"timeout": 1000}, headers={"accept": accept})
        assert r.status_code == 200, r.text
        got += r.json()
    return got


def test_produce_json_binary_and_plain_then_consume_in_a_group(http: httpx.Client) -> None:
    create_topic(http, "rest-rt", partitions=2)
    r = http.post("/topics/rest-rt", headers={"content-type": JSON_V2},
                  json={"records": [{"key": "k1", "value": {"n": 1}}, {"value": [1, 2, 3]}]})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(V2)
    offsets = r.json()["offsets"]
    assert len(offsets) == 2 and all(o["offset"] >= 0 and o["error_code"] is None for o in offsets)
    r = http.post("/topics/rest-rt/partitions/1", json={"records": [{"value": "plain"}]})
    assert r.status_code == 200 and r.json()["offsets"][0]["partition"] == 1

    base = new_consumer(http, "rest-rt-g")
    r = http.post(f"{base}/subscription", json={"topics": ["rest-rt"]})
    assert r.status_code == 204, r.text
    assert http.get(f"{base}/subscription").json() == {"topics": ["rest-rt"]}
    recs = poll_until(http, base, 3)
    assert sorted(str(x["value"]) for x in recs) == sorted(["{'n': 1}", "[1, 2, 3]", "plain"])
    keyed = next(x for x in recs if x["key"] is not None)
    assert keyed["key"] == "k1" and keyed["topic"] == "rest-rt"

    # Commit what was delivered, then the group's committed offsets match the log ends.
    assert http.post(f"{base}/offsets").status_code == 200
    parts = {"partitions": [{"topic": "rest-rt", "partition": p} for p in (0, 1)]}
    committed = http.request("GET", f"{base}/offsets", json=parts).json()["offsets"]
    ends = {p: http.get(f"/topics/rest-rt/partitions/{p}/offsets").json()["end_offset"]
            for p in (0, 1)}
    assert {o["partition"]: o["offset"] for o in committed} == ends
    assert http.delete(base).status_code == 204
    assert http.get(f"{base}/subscription").json()["error_code"] == 40403


def test_binary_round_trip_and_accept_negotiation(http: httpx.Client) -> None:
    create_topic(http, "rest-bin")
    payload = bytes(range(256))
    r = http.post("/topics/rest-bin", headers={"content-type": BINARY_V2}, json={"records": [
        {"key": base64.b64encode(b"\x00key").decode(), "value": base64.b64encode(payload).decode()}
    ]})
    assert r.status_code == 200, r.text
    base = new_consumer(http, "rest-bin-g", fmt="binary")
    r = http.post(f"{base}/assignments", json={"partitions": [{"topic": "rest-bin", "partition": 0}]})
    assert r.status_code == 204
    assert http.get(f"{base}/assignments").json() == {
        "partitions": [{"topic": "rest-bin", "partition": 0}]}
    # A json Accept on a binary consumer is refused, as the REST Proxy does.
    r = http.get(f"{base}/records", headers={"accept": JSON_V2})
    assert r.status_code == 406 and r.json()["error_code"] == 40601
    recs = poll_until(http, base, 1, accept=BINARY_V2)
    assert base64.b64decode(recs[0]["value"]) == payload
    assert base64.b64decode(recs[0]["key"]) == b"\x00key"
    # Seek back to the beginning and read the same record again.
    r = http.post(f"{base}/positions/beginning",
                  json={"partitions": [{"topic": "rest-bin", "partition": 0}]})
    assert r.status_code == 204
    again = poll_until(http, base, 1, accept=BINARY_V2)
    assert again[0]["offset"] == recs[0]["offset"]
    r = http.post(f"{base}/positions",
                  json={"offsets": [{"topic": "rest-bin", "partition": 0, "offset": 1}]})
    assert r.status_code == 204
    r = http.get(f"{base}/records", params={"timeout": 300}, headers={"accept": BINARY_V2})
    assert r.json() == []
    http.delete(base)


def test_long_poll_returns_as_soon_as_data_arrives(http: httpx.Client, gateway: Any) -> None:
    create_topic(http, "rest-lp")
    base = new_consumer(http, "rest-lp-g")
    http.post(f"{base}/assignments", json={"partitions": [{"topic": "rest-lp", "partition": 0}]})
    # consumer.request.timeout.ms is the wait of a GET records without `timeout`.
    quick = new_consumer(http, "rest-lp-g", **{"consumer.request.timeout.ms": 200})
    http.post(f"{quick}/assignments",
              json={"partitions": [{"topic": "rest-lp", "partition": 0}]})
    http.get(f"{quick}/records")
    t0 = time.monotonic()
    assert http.get(f"{quick}/records").json() == []
    assert time.monotonic() - t0 < 0.9
    http.delete(quick)
    # Warm up (first fetch sets the position) and prove the topic is empty.
    assert http.get(f"{base}/records", params={"timeout": 500}).json() == []
    result: dict[str, Any] = {}

    def long_poll() -> None:
        with httpx.Client(base_url=gateway.url, timeout=30) as c:
            t0 = time.monotonic()
            polling.set()
            r = c.get(f"{base}/records", params={"timeout": 15000})
            result["elapsed"] = time.monotonic() - t0
            result["records"] = r.json()

    polling = threading.Event()
    t = threading.Thread(target=long_poll)
    t.start()
    assert polling.wait(10), "the long-poll thread never got to its GET"
    time.sleep(1.0)  # the point: data that arrives ~1 s into the poll shows that it waited
    produced_at = time.monotonic()
    http.post("/topics/rest-lp", json={"records": [{"value": "wake up"}]})
    t.join(20)
    assert result["records"] and result["records"][0]["value"] == "wake up"
    # It waited for the data (>= ~1 s) but returned long before its 15 s timeout.
    assert 0.8 <= result["elapsed"] < 6.0, result
    assert time.monotonic() - produced_at < 5.0
    http.delete(base)


def test_max_bytes_splits_a_response_without_losing_records(http: httpx.Client) -> None:
    create_topic(http, "rest-mb")
    values = [f"v{i:03d}-" + "x" * 90 for i in range(20)]
    http.post("/topics/rest-mb", json={"records": [{"value": v} for v in values]})
    base = new_consumer(http, "rest-mb-g")
    http.post(f"{base}/assignments", json={"partitions": [{"topic": "rest-mb", "partition": 0}]})
    got: list[str] = []
    sizes = []
    deadline = time.monotonic() + 20
    while len(got) < 20 and time.monotonic() < deadline:
        r = http.get(f"{base}/records", params={"timeout": 1000, "max_bytes": 350})
        batch = r.json()
        sizes.append(len(batch))
        got += [x["value"] for x in batch]
    assert got == values
    assert max(sizes) <= 3  # ~100-byte JSON strings, at most 350 bytes per response
    http.delete(base)


def test_topic_and_partition_metadata(http: httpx.Client) -> None:
    create_topic(http, "rest-meta", partitions=3)
    assert "rest-meta" in http.get("/topics").json()
    t = http.get("/topics/rest-meta").json()
    assert t["name"] == "rest-meta" and len(t["partitions"]) == 3
    assert t["configs"]["cleanup.policy"] == "delete"
    p = http.get("/topics/rest-meta/partitions/2").json()
    assert p["partition"] == 2 and p["replicas"][0]["leader"] is True
    assert http.get("/brokers").json()["brokers"] == [p["leader"]]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        ("post", "/topics/rest-err", {"content": b'{"records": [', "headers": {
            "content-type": JSON_V2}}, 400, 400),
        ("post", "/topics/no-such-topic", {"json": {"records": [{"value": 1}]}}, 404, 40401),
        ("get", "/topics/no-such-topic", {}, 404, 40401),
        ("post", "/topics/rest-err/partitions/7", {"json": {"records": [{"value": 1}]}},
         404, 40402),
        ("get", "/topics/rest-err/partitions/7", {}, 404, 40402),
        ("post", "/topics/rest-err", {"content": b'{"records": []}', "headers": {
            "content-type": "application/vnd.kafka.cbor.v2+json"}}, 415, 41501),
        ("post", "/topics/rest-err", {"headers": {"content-type": BINARY_V2},
                                      "json": {"records": [{"value": "not base64!"}]}},
         422, 42206),
        ("post", "/topics/rest-err", {"json": {"records": "nope"}}, 422, 422),
        ("get", "/consumers/g/instances/nobody/assignments", {}, 404, 40403),
        ("get", "/api/topics/rest-err/messages", {"params": {"offset": 99}}, 422, 42207),
        ("get", "/api/topics/rest-err/messages", {"params": {"offset": -5}}, 422, 422),
        ("get", "/no/such/route", {}, 404, 404),
    ],
)
def test_bad_input_gets_rest_proxy_errors(http: httpx.Client, method: str, path: str,
                                          kwargs: dict[str, Any], status: int, code: int) -> None:
    if http.get("/topics/rest-err").status_code == 404:
        create_topic(http, "rest-err")
    r = http.request(method.upper(), path, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error_code"] == code and isinstance(body["message"], str) and body["message"]


def test_unknown_topic_is_not_auto_created(http: httpx.Client) -> None:
    assert http.post("/topics/typo-topic", json={"records": [{"value": 1}]}).status_code == 404
    assert "typo-topic" not in http.get("/topics").json()


def test_oversize_payload_is_refused_with_413(http: httpx.Client) -> None:
    big = {"records": [{"value": "x" * (9 * 1024 * 1024)}]}
    r = http.post("/topics/rest-err", json=big)
    assert r.status_code == 413 and r.json()["error_code"] == 413

    def chunks():  # no Content-Length: counted while streaming
        for _ in range(10):
            yield b" " * (1024 * 1024)

    r = http.post("/topics/rest-err", content=chunks(), headers={"content-type": JSON_V2})
    assert r.status_code == 413


def test_consumer_name_conflict_and_mutually_exclusive_subscription(http: httpx.Client) -> None:
    create_topic(http, "rest-excl")
    base = new_consumer(http, "rest-excl-g", name="fixed")
    r = http.post("/consumers/rest-excl-g", json={"name": "fixed", "format": "json"})
    assert r.status_code == 409 and r.json()["error_code"] == 40902
    http.post(f"{base}/assignments", json={"partitions": [{"topic": "rest-excl", "partition": 0}]})
    r = http.post(f"{base}/subscription", json={"topics": ["rest-excl"]})
    assert r.status_code == 409 and r.json()["error_code"] == 40903
    http.delete(base)


def test_a_non_json_record_is_an_error_for_a_json_consumer_but_is_not_lost(
    http: httpx.Client,
) -> None:
    create_topic(http, "rest-poison")
    http.post("/topics/rest-poison", json={"records": [{"value": {"ok": 1}}]})
    http.post("/topics/rest-poison", headers={"content-type": BINARY_V2},
              json={"records": [{"value": base64.b64encode(b"\xff not json").decode()}]})
    http.post("/topics/rest-poison", json={"records": [{"value": {"ok": 2}}]})
    base = new_consumer(http, "rest-poison-g")
    http.post(f"{base}/assignments",
              json={"partitions": [{"topic": "rest-poison", "partition": 0}]})
    first = poll_until(http, base, 1)
    assert [r["value"] for r in first] == [{"ok": 1}]
    r = http.get(f"{base}/records", params={"timeout": 500})
    assert r.status_code == 422 and r.json()["error_code"] == 42206
    assert "rest-poison-0@1" in r.json()["message"]
    # Still there on the next GET; seeking past it continues with the next record.
    assert http.get(f"{base}/records", params={"timeout": 500}).status_code == 422
    http.post(f"{base}/positions",
              json={"offsets": [{"topic": "rest-poison", "partition": 0, "offset": 2}]})
    assert [r["value"] for r in poll_until(http, base, 1)] == [{"ok": 2}]
    http.delete(base)


def test_console_api_alters_configs_and_browses_by_timestamp(http: httpx.Client) -> None:
    create_topic(http, "rest-cfg")
    r = http.put("/api/topics/rest-cfg/configs", json={"configs": {"retention.ms": "3600000"}})
    assert r.status_code == 200, r.text
    cfg = {c["name"]: c for c in r.json()["configs"]}
    assert cfg["retention.ms"]["value"] == "3600000" and not cfg["retention.ms"]["is_default"]
    r = http.put("/api/topics/rest-cfg/configs", json={"configs": {"retention.ms": None}})
    cfg = {c["name"]: c for c in r.json()["configs"]}
    assert cfg["retention.ms"]["is_default"]
    r = http.put("/api/topics/rest-cfg/configs", json={"configs": {"retention.ms": "soon"}})
    assert r.status_code == 422 and r.json()["error_code"] == 42200

    for i in range(3):
        http.post("/api/topics/rest-cfg/messages", json={"value": f"m{i}"})
        time.sleep(0.05)  # distinct millisecond timestamps, for the lookup by timestamp below
    msgs = http.get("/api/topics/rest-cfg/messages", params={"offset": -2}).json()["messages"]
    assert [base64.b64decode(m["value"]) for m in msgs] == [b"m0", b"m1", b"m2"]
    ts = msgs[1]["timestamp"]
    by_time = http.get("/api/topics/rest-cfg/messages", params={"timestamp": ts}).json()
    assert by_time["start"] == 1 and by_time["messages"][0]["offset"] == 1
    future = http.get("/api/topics/rest-cfg/messages", params={"timestamp": ts + 10**9}).json()
    assert future["messages"] == []


def test_pattern_subscription_picks_up_matching_topics(http: httpx.Client) -> None:
    create_topic(http, "rest-pat-a")
    create_topic(http, "rest-pat-b")
    create_topic(http, "rest-other")
    for t in ("rest-pat-a", "rest-pat-b", "rest-other"):
        http.post(f"/topics/{t}", json={"records": [{"value": t}]})
    base = new_consumer(http, "rest-pat-g")
    r = http.post(f"{base}/subscription", json={"topic_pattern": "rest-pat-.*"})
    assert r.status_code == 204, r.text
    got = poll_until(http, base, 2)
    assert sorted(x["value"] for x in got) == ["rest-pat-a", "rest-pat-b"]
    r = http.post(f"{base}/subscription", json={"topics": ["a"], "topic_pattern": "b"})
    assert r.status_code == 422
    http.delete(base)
