"""Queues through the HTTP gateway with HTTP Basic auth on a SASL_SSL-only broker with
ACLs (`yak serve --http-tls --http-auth basic`): a REST share consumer joins its share
group and fetches as the user itself (SCRAM-SHA-512 over TLS, through `yak.wire`), so
the cluster's ACLs for that user decide; another user cannot reach its instance.
"""

from __future__ import annotations

import base64
import ssl
import time

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from conftest import free_port

from security.conftest import JAAS_SCRAM, Certs, SecuredBroker, start_secured
from security.wire import rdkafka

ADMIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'username="admin" password="admin-secret" user_admin="admin-secret";')


def _acl(rtype: ResourceType, name: str, principal: str, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, principal, "*", op,
                      AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> SecuredBroker:
    d = tmp_path_factory.mktemp("gwshare") / "data"
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
    conf = rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin", "admin-secret")
    admin = AdminClient(conf)
    ups = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512,
                                                               4096), pw.encode())
           for u, pw in (("alice", "alice-secret"), ("bob", "bob-secret"))]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(15)
    admin.create_topics([NewTopic("queue", 2)])["queue"].result(15)
    for f in admin.create_acls([
        _acl(ResourceType.TOPIC, "queue", "User:alice", AclOperation.READ),
        _acl(ResourceType.GROUP, "alice-share", "User:alice", AclOperation.READ),
        _acl(ResourceType.TOPIC, "queue", "User:bob", AclOperation.READ),  # no group
    ]).values():
        f.result(15)
    res = ConfigResource(ResourceType.GROUP, "alice-share", incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)
    p = Producer(conf)
    for i in range(6):
        p.produce("queue", value=b"q%d" % i, partition=i % 2)
    assert p.flush(15) == 0
    b.gateway_url = f"https://127.0.0.1:{http}"  # type: ignore[attr-defined]
    yield b
    b.stop(15)


def _client(gw: SecuredBroker, certs: Certs, user: str, password: str) -> httpx.Client:
    return httpx.Client(base_url=gw.gateway_url,  # type: ignore[attr-defined]
                        verify=ssl.create_default_context(cafile=str(certs.ca)),
                        auth=(user, password), timeout=30)


def test_a_rest_share_consumer_acts_as_its_user(gw: SecuredBroker, certs: Certs) -> None:
    with _client(gw, certs, "alice", "alice-secret") as c:
        r = c.post("/share-groups/alice-share", json={"topics": ["queue"], "name": "a"})
        assert r.status_code == 200, r.text
        base = "/share-groups/alice-share/instances/a"
        got: list[dict] = []
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            r = c.get(f"{base}/records", params={"timeout": 1000})
            assert r.status_code == 200, r.text
            got += r.json()
        assert sorted(base64.b64decode(x["value"]) for x in got) == [
            b"q%d" % i for i in range(6)]
        r = c.post(f"{base}/acknowledgements",
                   json={"acknowledgements": [{"id": x["id"]} for x in got]})
        assert r.status_code == 200, r.text
    with _client(gw, certs, "bob", "bob-secret") as c:
        # not bob's instance
        assert c.get(f"{base}/records", params={"timeout": 0}).status_code == 404
        # bob may read the topic but not the group: the cluster refuses his heartbeat
        r = c.post("/share-groups/alice-share", json={"topics": ["queue"]})
        assert r.status_code == 403, r.text
        assert "GROUP_AUTHORIZATION_FAILED" in r.json()["message"]
    with _client(gw, certs, "alice", "alice-secret") as c:
        assert c.delete(base).status_code == 204
