"""The gateway on a secured cluster: its Kafka clients log in (TLS + SASL) as the broker
itself (`yak serve`) or as the user given with -X / --command-config (`yak gateway`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from conftest import free_port

from security.wire import consume, rdkafka
from tests.waiting import wait_until

JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" '
        'user_admin="admin-secret" user_alice="alice-secret";')
V2 = "application/vnd.kafka.json.v2+json"


def _secured(secured_broker, http=None):
    return secured_broker(["SASL_SSL"], http=http, **{
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    })


def _produce(url: str, topic: str, value: str) -> httpx.Response:
    return httpx.post(f"{url}/topics/{topic}", headers={"Content-Type": V2},
                      json={"records": [{"value": value}]}, timeout=30)


def test_embedded_gateway_logs_in_with_the_brokers_credentials(secured_broker, certs):
    port = free_port()
    b = _secured(secured_broker, http=f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}"
    conf = rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin", "admin-secret")
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("via-rest", 1)])["via-rest"].result(15)
    r = _produce(url, "via-rest", "hello")
    assert r.status_code == 200, r.text
    assert r.json()["offsets"][0]["error_code"] is None
    assert consume(conf, "via-rest", 1) == [b'"hello"']
    assert "via-rest" in httpx.get(f"{url}/topics", timeout=30).json()


def test_standalone_gateway_uses_the_given_principal(secured_broker, certs, tmp_path):
    b = _secured(secured_broker)
    port = free_port()
    cmd = [sys.executable, "-m", "yak.cli.main", "gateway", "--bootstrap", b.addr("SASL_SSL"),
           "--http", f"127.0.0.1:{port}", "-X", "security.protocol=SASL_SSL",
           "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=alice",
           "-X", "sasl.password=alice-secret", "-X", f"ssl.ca.location={certs.ca}"]
    out = tmp_path / "gw.out"
    with open(out, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 30
        while "ready" not in out.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, out.read_text()
            time.sleep(0.1)  # back-off of this wait-for-ready loop
        conf = rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin", "admin-secret")
        admin = AdminClient(conf)
        admin.create_topics([NewTopic("alices", 1)])["alices"].result(15)
        admin.create_acls([AclBinding(ResourceType.TOPIC, "alices", ResourcePatternType.LITERAL,
                                      "User:alice", "*", AclOperation.DESCRIBE,
                                      AclPermissionType.ALLOW)])
        # alice may see the topic once the ACL is in force (was: 0.5 s and hope)
        wait_until(lambda: "alices" in httpx.get(f"http://127.0.0.1:{port}/topics",
                                                 timeout=10).json(), 15,
                   "alice's DESCRIBE on alices in force at the gateway")
        # alice may see the topic but not write to it: the cluster refuses her, and the
        # gateway says so (the request as a whole, as Confluent's REST Proxy does).
        r = _produce(f"http://127.0.0.1:{port}", "alices", "nope")
        assert r.status_code == 403, r.text
        assert r.json()["error_code"] == 40301
        assert "TOPIC_AUTHORIZATION_FAILED" in r.json()["message"]
    finally:
        proc.terminate()
        proc.wait(15)
