"""The HTTP gateway with HTTPS and HTTP Basic auth (`yak serve --http-tls --http-auth basic`):
each user is logged in to the cluster as itself (SCRAM-SHA-512), so the cluster's ACLs
for that user decide what the REST Proxy, the WebSocket, the schema registry, the
console's API and /metrics do for it. One real broker (SASL_SSL, StandardAuthorizer),
certificates from trustme, httpx and websockets as the clients.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from pathlib import Path

import httpx
import pytest
import websockets
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from conftest import free_port

from security.conftest import JAAS_SCRAM, Certs, SecuredBroker, start_secured
from security.wire import consume, rdkafka

ADMIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'username="admin" password="admin-secret" user_admin="admin-secret";')
V2 = "application/vnd.kafka.json.v2+json"
SR = "application/vnd.schemaregistry.v1+json"


class Gw:
    def __init__(self, broker: SecuredBroker, url: str, ca: Path) -> None:
        self.broker = broker
        self.url = url
        self.ca = ca

    def client(self, user: str | None = None, password: str | None = None) -> httpx.Client:
        auth = (user, password) if user is not None else None
        return httpx.Client(base_url=self.url, verify=self.tls(), auth=auth, timeout=30)

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


def _acl(rtype: ResourceType, name: str, principal: str, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, principal, "*", op,
                      AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> SecuredBroker:
    d = tmp_path_factory.mktemp("gwauth") / "data"
    d.mkdir()
    http = free_port()
    b = start_secured(
        d, ["SASL_SSL"], certs, http=f"127.0.0.1:{http}",
        args=["--http-tls", "--http-auth", "basic"],
        **{
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": ADMIN_JAAS,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS_SCRAM,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        })
    admin = AdminClient(rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin",
                                "admin-secret"))
    ups = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512,
                                                               4096), pw.encode())
           for u, pw in (("alice", "alice-secret"), ("bob", "bob-secret"),
                         ("admin", "admin-secret"))]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(15)
    for f in admin.create_topics([NewTopic(t, 1) for t in
                                  ("alice-topic", "other-topic", "read-only")]).values():
        f.result(15)
    acls = [
        _acl(ResourceType.TOPIC, "alice-topic", "User:alice", AclOperation.WRITE),
        _acl(ResourceType.TOPIC, "alice-topic", "User:alice", AclOperation.READ),
        _acl(ResourceType.TOPIC, "read-only", "User:alice", AclOperation.READ),
        _acl(ResourceType.GROUP, "alice-group", "User:alice", AclOperation.READ),
        _acl(ResourceType.TOPIC, "_schemas", "User:alice", AclOperation.READ),
        _acl(ResourceType.TOPIC, "_schemas", "User:bob", AclOperation.READ),
        _acl(ResourceType.TOPIC, "_schemas", "User:bob", AclOperation.WRITE),
    ]
    for f in admin.create_acls(acls).values():
        f.result(15)
    b.gateway = Gw(b, f"https://127.0.0.1:{http}", certs.ca)  # type: ignore[attr-defined]
    yield b
    b.stop(15)


def _produce(c: httpx.Client, topic: str, *values: str) -> httpx.Response:
    return c.post(f"/topics/{topic}", headers={"Content-Type": V2},
                  json={"records": [{"value": v} for v in values]})


def test_https_and_no_credentials_is_401(gw, certs):
    g: Gw = gw.gateway
    with g.client() as c:
        r = c.get("/topics")
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Basic realm=")
    assert r.json()["error_code"] == 40101
    # The console's page and static files are behind the same login (a browser asks).
    with g.client() as c:
        assert c.get("/").status_code == 401
    # Plain HTTP on the HTTPS port is not served.
    with pytest.raises(httpx.HTTPError):
        httpx.get(g.url.replace("https", "http") + "/topics", timeout=5)


def test_wrong_password_is_401_with_the_clusters_message(gw):
    g: Gw = gw.gateway
    with g.client("alice", "not-her-password") as c:
        r = c.get("/topics")
    assert r.status_code == 401, r.text
    assert "SASL_AUTHENTICATION_FAILED" in r.json()["message"]
    with g.client("nobody", "x") as c:
        assert c.get("/topics").status_code == 401
    # Not Basic at all.
    r = httpx.get(f"{g.url}/topics", headers={"Authorization": "Bearer abc"},
                  verify=g.tls(), timeout=30)
    assert r.status_code == 401


def test_each_user_sees_and_writes_what_its_acls_allow(gw, certs):
    g: Gw = gw.gateway
    with g.client("alice", "alice-secret") as c:
        topics = c.get("/topics").json()
        assert "alice-topic" in topics and "read-only" in topics
        assert "other-topic" not in topics  # no DESCRIBE: hidden, as Metadata hides it
        r = _produce(c, "alice-topic", "a1", "a2")
        assert r.status_code == 200, r.text
        assert [o["offset"] for o in r.json()["offsets"]] == [0, 1]
        # May describe but not write: the cluster refuses every record -> 403.
        r = _produce(c, "read-only", "nope")
        assert r.status_code == 403, r.text
        assert r.json()["error_code"] == 40301
        assert "TOPIC_AUTHORIZATION_FAILED" in r.json()["message"]
        # May not even describe: 403 as Kafka answers a named topic (never 404).
        r = _produce(c, "other-topic", "nope")
        assert r.status_code == 403, r.text
        assert "TOPIC_AUTHORIZATION_FAILED" in r.json()["message"]
        assert c.get("/topics/other-topic").status_code == 403
        assert c.get("/topics/no-such-topic").status_code == 403
    with g.client("bob", "bob-secret") as c:
        assert _produce(c, "alice-topic", "b").status_code == 403
    admin = rdkafka(gw.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin", "admin-secret")
    assert consume(admin, "alice-topic", 2) == [b'"a1"', b'"a2"']
    # The super user sees everything, and unknown topics are 404 to it.
    with g.client("admin", "admin-secret") as c:
        r = c.get("/topics/no-such-topic")
        assert r.status_code == 404, r.text


def test_rest_consumers_belong_to_their_user(gw):
    g: Gw = gw.gateway
    with g.client("alice", "alice-secret") as c:
        r = c.post("/consumers/alice-group", json={"name": "a", "format": "json",
                                                   "auto.offset.reset": "earliest"},
                   headers={"Content-Type": "application/vnd.kafka.v2+json"})
        assert r.status_code == 200, r.text
        base = "/consumers/alice-group/instances/a"
        assert c.post(f"{base}/subscription", json={"topics": ["alice-topic"]},
                      headers={"Content-Type": "application/vnd.kafka.v2+json"}
                      ).status_code == 204
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            r = c.get(f"{base}/records?timeout=1000", headers={"Accept": V2})
            assert r.status_code == 200, r.text
            got += [x["value"] for x in r.json()]
        assert got[:2] == ["a1", "a2"]
    with g.client("bob", "bob-secret") as c:  # another user: not its instance
        r = c.get(f"{base}/records?timeout=100", headers={"Accept": V2})
        assert r.status_code == 404
    with g.client("alice", "alice-secret") as c:
        assert c.delete(base).status_code == 204


def test_websocket_needs_credentials_and_acts_as_the_user(gw, certs):
    g: Gw = gw.gateway
    ctx = g.tls()
    uri = g.url.replace("https", "wss") + "/ws"

    async def run() -> None:
        with pytest.raises(websockets.InvalidStatus) as e:
            async with websockets.connect(uri, ssl=ctx, open_timeout=10):
                pass
        assert e.value.response.status_code == 401
        bad = {"Authorization": "Basic " + base64.b64encode(b"alice:wrong").decode()}
        with pytest.raises(websockets.InvalidStatus) as e:
            async with websockets.connect(uri, ssl=ctx, additional_headers=bad,
                                          open_timeout=15):
                pass
        assert e.value.response.status_code == 401
        good = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-secret").decode()}
        async with websockets.connect(uri, ssl=ctx, additional_headers=good,
                                      open_timeout=15) as ws:
            await ws.send(json.dumps({"type": "produce", "id": 1, "topic": "alice-topic",
                                      "value": "via-ws"}))
            await ws.send(json.dumps({"type": "produce", "id": 2, "topic": "read-only",
                                      "value": "refused"}))
            answers = {}
            while len(answers) < 2:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                answers[msg.get("id", msg["type"])] = msg
            assert answers[1]["type"] == "produced", answers
            refused = answers.get(2) or answers.get("error")
            assert refused["type"] == "error", answers
            assert "TOPIC_AUTHORIZATION_FAILED" in refused["message"]

    asyncio.run(run())


def test_schema_registry_reads_need_read_and_writes_need_write_on_schemas(gw):
    g: Gw = gw.gateway
    schema = {"schema": json.dumps({"type": "record", "name": "V",
                                    "fields": [{"name": "a", "type": "int"}]})}
    with g.client() as c:
        assert c.get("/subjects").status_code == 401
    with g.client("alice", "alice-secret") as c:
        assert c.get("/subjects").status_code == 200
        r = c.post("/subjects/v-value/versions", json=schema, headers={"Content-Type": SR})
        assert r.status_code == 403, r.text
        assert "TOPIC_AUTHORIZATION_FAILED" in r.json()["message"]
    with g.client("bob", "bob-secret") as c:
        r = c.post("/subjects/v-value/versions", json=schema, headers={"Content-Type": SR})
        assert r.status_code == 200, r.text
        sid = r.json()["id"]
    with g.client("alice", "alice-secret") as c:
        assert c.get("/subjects").json() == ["v-value"]
        assert c.get(f"/schemas/ids/{sid}").status_code == 200
        # a lookup is a POST but a read
        r = c.post("/subjects/v-value", json=schema, headers={"Content-Type": SR})
        assert r.status_code == 200 and r.json()["id"] == sid, r.text


def test_metrics_need_describe_on_the_cluster_and_console_api_acts_as_the_user(gw):
    g: Gw = gw.gateway
    with g.client("alice", "alice-secret") as c:
        r = c.get("/metrics")
        assert r.status_code == 403
        assert "CLUSTER_AUTHORIZATION_FAILED" in r.json()["message"]
        names = [t["name"] for t in c.get("/api/topics").json()]
        assert "alice-topic" in names and "other-topic" not in names
    with g.client("admin", "admin-secret") as c:
        assert c.get("/metrics").status_code == 200
        names = [t["name"] for t in c.get("/api/topics").json()]
        assert "other-topic" in names
