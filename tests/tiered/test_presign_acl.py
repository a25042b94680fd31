"""Presigned segment URLs are handed out only to callers the cluster lets READ the topic.

One real broker with the StandardAuthorizer, a SASL_PLAINTEXT listener (the broker logs in
as the PLAIN super user `admin`, HTTP callers as SCRAM users) and tiering on SeaweedFS
with an identity (tests/tiered/test_presign.py); the embedded gateway with HTTP Basic
callers, each logged in to the cluster as itself, so the cluster's ACLs decide:

- alice (READ on the topic) gets the segments and URLs that read them;
- bob (DESCRIBE only) gets 403 TOPIC_AUTHORIZATION_FAILED and no URL; carol (nothing) too,
  and for a topic that does not exist as well (Kafka never tells an unauthorized caller
  whether a topic exists);
- no credentials: 401.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.conftest import free_port
from tests.security.conftest import JAAS_SCRAM, make_certs, start_secured
from tests.security.wire import rdkafka
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_presign import (
    authed_s3_fixture,
    create_topic,
    produce,
    segments,
    tiered_settings,
    wait_tiered,
)

pytestmark = pytest.mark.timeout(300)

ADMIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'username="admin" password="admin-secret" user_admin="admin-secret";')
TOPIC = "guarded"


s3 = authed_s3_fixture("seaweed-presign-acl")


@pytest.fixture(scope="module")
def gw(s3: SeaweedS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("presign-acl")
    certs = make_certs(base)
    data = base / "data"
    data.mkdir()
    http = free_port()
    b = start_secured(
        data, ["SASL_PLAINTEXT"], certs, http=f"127.0.0.1:{http}",
        args=["--http-auth", "basic"],
        **tiered_settings(s3, "acl"),
        **{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
           "sasl.mechanism.inter.broker.protocol": "PLAIN",
           "listener.name.sasl_plaintext.plain.sasl.jaas.config": ADMIN_JAAS,
           "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": JAAS_SCRAM,
           "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin"})
    try:
        conf = rdkafka(b.addr("SASL_PLAINTEXT"), "SASL_PLAINTEXT", None, "PLAIN", "admin",
                       "admin-secret")
        admin = AdminClient(conf)
        ups = [UserScramCredentialUpsertion(u, ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_512, 4096), f"{u}-secret".encode())
            for u in ("alice", "bob", "carol")]
        for f in admin.alter_user_scram_credentials(ups).values():
            f.result(15)
        create_topic(admin, TOPIC, 1)

        def acl(principal: str, op: AclOperation) -> AclBinding:
            return AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL,
                              principal, "*", op, AclPermissionType.ALLOW)
        for f in admin.create_acls([acl("User:alice", AclOperation.READ),
                                    acl("User:bob", AclOperation.DESCRIBE)]).values():
            f.result(15)
        produce(conf, TOPIC, 1, 3000)
        wait_tiered(b, s3, "acl", TOPIC, 1, 1000)
        yield f"http://127.0.0.1:{http}"
    finally:
        try:
            b.stop(10)
        finally:
            b.kill()


def test_only_readers_get_presigned_urls(gw: str) -> None:
    r = segments(gw, TOPIC, 0, auth=("alice", "alice-secret"))
    assert r.status_code == 200, r.text
    segs = r.json()["segments"]
    assert segs and segs[0]["base_offset"] == 0
    got = httpx.get(segs[0]["urls"]["log"], headers={"Range": "bytes=0-60"}, timeout=30)
    assert got.status_code == 206 and len(got.content) == 61

    for user in ("bob", "carol"):
        r = segments(gw, TOPIC, 0, auth=(user, f"{user}-secret"))
        assert r.status_code == 403, r.text
        assert r.json()["error_code"] == 40301
        assert "TOPIC_AUTHORIZATION_FAILED" in r.json()["message"]
        assert "X-Amz" not in r.text
    r = segments(gw, "no-such-topic", 0, auth=("carol", "carol-secret"))
    assert r.status_code == 403, r.text
    assert segments(gw, TOPIC, 0).status_code == 401
