"""SCRAM credentials, ACLs and client quotas are the cluster's, not one broker's: changed
through broker 1, every broker answers and enforces them (they are documents in etcd,
`yak/security/cluster_stores.py`), and a broker that restarts finds them.

Three real `yak serve` processes on the session's etcd, PLAINTEXT (User:ANONYMOUS) with the
StandardAuthorizer and allow.everyone.if.no.acl.found=true, so ANONYMOUS may administer
until an ACL says otherwise. Changes go through confluent-kafka's AdminClient and the `yak`
CLI bootstrapped on broker 1; each broker is then asked on its own (raw requests on one
connection to it), so the answer is that broker's.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

from broker.rawclient import RawClient
from confluent_kafka import KafkaError, Producer
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

from tests.waiting import wait_until
from yak.protocol import kio_compat

AUTHZ = {"authorizer_class_name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "allow_everyone_if_no_acl_found": "true"}


def eventually(check: Callable[[], Any], timeout: float = 15.0) -> Any:
    return wait_until(check, timeout, check.__doc__ or repr(check), every=0.1)


def raw(bootstrap: str, api: str, version: int, cls: str, **fields: Any) -> Any:
    mod = kio_compat.schema_module(api, version, "request")
    with RawClient(bootstrap) as c:
        return c.request(kio_compat.build(getattr(mod, cls), **fields))


def acl_names(bootstrap: str) -> set[tuple[str, str, int]]:
    """(topic, principal, operation) of the TOPIC ACLs this one broker describes."""
    r = raw(bootstrap, "describe_acls", 3, "DescribeAclsRequest", resource_type_filter=2,
            resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1)
    assert r.error_code == 0, r
    return {(res.resource_name, a.principal, a.operation) for res in r.resources for a in res.acls}


def scram_users(bootstrap: str) -> set[str]:
    r = raw(bootstrap, "describe_user_scram_credentials", 0,
            "DescribeUserScramCredentialsRequest", users=None)
    return {u.user for u in r.results if u.error_code == 0}


def quota_entities(bootstrap: str) -> dict[str, dict[str, float]]:
    mod = kio_compat.schema_module("describe_client_quotas", 1, "request")
    with RawClient(bootstrap) as c:
        r = c.request(mod.DescribeClientQuotasRequest(
            components=(mod.ComponentData(entity_type="user", match_type=2, match=None),),
            strict=False))
    assert r.error_code == 0, r
    return {e.entity[0].entity_name: {v.key: v.value for v in e.values} for e in r.entries}


def test_credentials_acls_and_quotas_are_the_clusters(cluster_factory) -> None:  # noqa: ANN001
    c = cluster_factory(3, **AUTHZ)
    one = c[1].bootstrap
    admin = AdminClient({"bootstrap.servers": one})
    for f in admin.create_topics([NewTopic("locked", 3, 3), NewTopic("open", 3, 3)]).values():
        f.result(30)

    # An ACL through broker 1: every broker lists it, and every leader enforces it.
    deny = AclBinding(ResourceType.TOPIC, "locked", ResourcePatternType.LITERAL,
                      "User:ANONYMOUS", "*", AclOperation.WRITE, AclPermissionType.DENY)
    for f in admin.create_acls([deny]).values():
        f.result(15)
    want = ("locked", "User:ANONYMOUS", int(AclOperation.WRITE.value))
    for n in (1, 2, 3):
        eventually(lambda n=n: want in acl_names(c[n].bootstrap))
    results: dict[tuple[str, int], Any] = {}
    p = Producer({"bootstrap.servers": c.bootstrap, "message.timeout.ms": 10000})
    for topic in ("locked", "open"):
        for part in range(3):  # RF 3, 3 partitions: led by all three brokers
            p.produce(topic, b"v", partition=part,
                      on_delivery=lambda err, msg, k=(topic, part): results.__setitem__(k, err))
    assert p.flush(30) == 0
    for part in range(3):
        assert results[("open", part)] is None
        err = results[("locked", part)]
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    # A SCRAM user through broker 1: every broker knows it.
    up = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-pw")
    for f in admin.alter_user_scram_credentials([up]).values():
        f.result(15)
    for n in (1, 2, 3):
        eventually(lambda n=n: "alice" in scram_users(c[n].bootstrap))

    # A quota through broker 1 (the yak CLI): every broker describes it.
    r = subprocess.run([sys.executable, "-m", "yak.cli.main", "quota", "set", "--user", "alice",
                        "producer_byte_rate=1024", "-b", one],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for n in (1, 2, 3):
        eventually(lambda n=n: quota_entities(c[n].bootstrap).get("alice")
                   == {"producer_byte_rate": 1024.0})

    # A broker restarted finds all three (nothing of it lives in its data dir).
    c[3].stop(30)
    c[3].start()
    c.wait_registered()
    three = c[3].bootstrap
    assert want in acl_names(three)
    assert "alice" in scram_users(three)
    assert quota_entities(three)["alice"] == {"producer_byte_rate": 1024.0}
