"""ACLs end to end: Kafka's StandardAuthorizer semantics through unmodified clients.

One broker with `authorizer.class.name` set, `super.users=User:admin`, and the default
`allow.everyone.if.no.acl.found=false` (deny by default); users log in with SASL PLAIN.
ACLs are created and deleted by the super user through confluent-kafka's AdminClient.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from security.conftest import Certs, SecuredBroker, plain_users, start_secured
from security.wire import SaslRaw, consume, produce, rdkafka
from yak.protocol import kio_compat

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> SecuredBroker:
    d = tmp_path_factory.mktemp("acl") / "data"
    d.mkdir()
    broker = start_secured(
        d, ["SASL_PLAINTEXT", "PLAINTEXT"], certs,
        **{
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_users(**USERS),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        },
    )
    yield broker
    broker.stop(10)


def conf(b: SecuredBroker, user: str, **extra) -> dict:
    return rdkafka(b.addr("SASL_PLAINTEXT"), "SASL_PLAINTEXT", None, "PLAIN", user,
                   USERS[user], **{"message.timeout.ms": 6000, **extra})


def admin(b: SecuredBroker, user: str = "admin") -> AdminClient:
    return AdminClient(conf(b, user))


def acl(rtype, name, principal, op, perm=AclPermissionType.ALLOW,
        pattern=ResourcePatternType.LITERAL, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


# (an AdminClient must outlive the futures it returned: keep a reference while waiting)
def create(b: SecuredBroker, *bindings: AclBinding) -> None:
    a = admin(b)
    for f in a.create_acls(list(bindings)).values():
        f.result(15)


def delete(b: SecuredBroker, *filters: AclBindingFilter) -> list:
    a = admin(b)
    out = []
    for f in a.delete_acls(list(filters)).values():
        out += f.result(15)
    return out


def make_topics(b: SecuredBroker, *names: str) -> None:
    a = admin(b)
    for f in a.create_topics([NewTopic(n, 1) for n in names]).values():
        f.result(15)


def code(errs: list) -> int | None:
    return None if errs[0] is None else errs[0].code()


def test_deny_by_default_and_super_user_may_do_anything(b):
    make_topics(b, "default-deny")
    assert produce(conf(b, "admin"), "default-deny", [b"by admin"]) == [None]
    assert code(produce(conf(b, "alice"), "default-deny", [b"x"])) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    # ANONYMOUS on the PLAINTEXT listener is denied just the same.
    errs = produce(rdkafka(b.addr("PLAINTEXT"), **{"message.timeout.ms": 6000}),
                   "default-deny", [b"x"])
    assert code(errs) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # All-topics Metadata hides what the caller may not describe (internal ones included).
    assert "default-deny" not in admin(b, "alice").list_topics(timeout=10).topics
    assert "default-deny" in admin(b).list_topics(timeout=10).topics
    # Creating topics needs CREATE (cluster or topic).
    alice = admin(b, "alice")
    with pytest.raises(KafkaException) as ei:
        alice.create_topics([NewTopic("alices-own", 1)])["alices-own"].result(15)
    assert ei.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # ACL admin needs ALTER / DESCRIBE on the cluster. (librdkafka drops DescribeAcls'
    # top-level error code and reports an empty list, so that one is checked raw.)
    with pytest.raises(KafkaException) as ei:
        alice.create_acls([acl(ResourceType.TOPIC, "x", "User:alice", AclOperation.ALL)])[
            acl(ResourceType.TOPIC, "x", "User:alice", AclOperation.ALL)].result(15)
    assert ei.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    mod = kio_compat.schema_module("describe_acls", 3, "request")
    with SaslRaw(b.addr("SASL_PLAINTEXT")) as c:
        assert c.login_plain("alice", "alice-secret").error_code == 0
        r = c.request(mod.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1))
        assert r.error_code == 31 and r.resources == ()


def test_prefixed_write_and_read_with_a_group(b):
    make_topics(b, "orders-eu", "orders-us", "payments")
    create(b,
           acl(ResourceType.TOPIC, "orders-", "User:alice", AclOperation.WRITE,
               pattern=ResourcePatternType.PREFIXED),
           acl(ResourceType.TOPIC, "orders-", "User:alice", AclOperation.READ,
               pattern=ResourcePatternType.PREFIXED))
    c = conf(b, "alice")
    assert produce(c, "orders-eu", [b"eu-1"]) == [None]
    assert produce(c, "orders-us", [b"us-1"]) == [None]
    assert code(produce(c, "payments", [b"p"])) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # READ on the topic but no group ACL: the consumer group is refused.
    cons = Consumer({**c, "group.id": "alice-group", "auto.offset.reset": "earliest"})
    cons.subscribe(["orders-eu"])
    err = None
    for _ in range(30):
        m = cons.poll(0.5)
        if m is not None and m.error():
            err = m.error()
            break
    cons.close()
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    create(b, acl(ResourceType.GROUP, "alice-", "User:alice", AclOperation.READ,
                  pattern=ResourcePatternType.PREFIXED))
    assert consume(c, "orders-eu", 1, group="alice-group") == [b"eu-1"]
    # Describing (READ implies DESCRIBE): alice now sees her topics and only those.
    topics = set(admin(b, "alice").list_topics(timeout=10).topics)
    assert {"orders-eu", "orders-us"} <= topics and "payments" not in topics
    # bob has nothing.
    assert code(produce(conf(b, "bob"), "orders-eu", [b"b"])) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_beats_allow_and_revocation_applies_to_the_next_request(b):
    make_topics(b, "shared-data", "shared-secret")
    create(b,
           acl(ResourceType.TOPIC, "shared-", "User:*", AclOperation.WRITE,
               pattern=ResourcePatternType.PREFIXED),
           acl(ResourceType.TOPIC, "shared-secret", "User:bob", AclOperation.WRITE,
               AclPermissionType.DENY))
    assert produce(conf(b, "bob"), "shared-data", [b"ok"]) == [None]
    assert code(produce(conf(b, "bob"), "shared-secret", [b"no"])) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(conf(b, "alice"), "shared-secret", [b"alice may"]) == [None]

    # Revocation: one producer keeps its connection; the ACL is gone for its next request.
    from confluent_kafka import Producer

    results: list = []
    p = Producer(conf(b, "alice"))
    p.produce("shared-data", b"before", on_delivery=lambda e, m: results.append(e))
    assert p.flush(15) == 0 and results == [None]
    removed = delete(b, AclBindingFilter(ResourceType.TOPIC, "shared-",
                                         ResourcePatternType.PREFIXED, "User:*", None,
                                         AclOperation.ANY, AclPermissionType.ANY))
    assert len(removed) == 1
    p.produce("shared-data", b"after", on_delivery=lambda e, m: results.append(e))
    assert p.flush(15) == 0
    assert results[1] is not None
    assert results[1].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_describe_and_delete_acls_report_what_they_matched(b):
    create(b, acl(ResourceType.TOPIC, "reports", "User:bob", AclOperation.READ),
           acl(ResourceType.TOPIC, "reports", "User:bob", AclOperation.DESCRIBE,
               AclPermissionType.DENY, host="10.0.0.1"))
    flt = AclBindingFilter(ResourceType.TOPIC, "reports", ResourcePatternType.LITERAL, None,
                           None, AclOperation.ANY, AclPermissionType.ANY)
    a = admin(b)
    found = a.describe_acls(flt).result(15)
    assert {(a.principal, a.operation, a.permission_type, a.host) for a in found} == {
        ("User:bob", AclOperation.READ, AclPermissionType.ALLOW, "*"),
        ("User:bob", AclOperation.DESCRIBE, AclPermissionType.DENY, "10.0.0.1"),
    }
    assert len(delete(b, flt)) == 2
    assert a.describe_acls(flt).result(15) == []


def test_named_unauthorized_topics_are_topic_authorization_failed(b):
    with SaslRaw(b.addr("SASL_PLAINTEXT")) as c:
        assert c.login_plain("bob", "bob-secret").error_code == 0
        md = c.metadata(["payments", "no-such-topic"])
        assert [(t.name, t.error_code) for t in md.topics] == [
            ("payments", 29), ("no-such-topic", 29)]  # existence is not revealed


def test_a_forged_replica_fetch_is_refused(b):
    """Fetch with replica_id >= 0 is a follower's: it needs CLUSTER_ACTION on the cluster,
    which a client principal with READ on the topic does not have."""
    make_topics(b, "replicated")
    assert produce(conf(b, "admin"), "replicated", [b"secret-ish"]) == [None]
    create(b, acl(ResourceType.TOPIC, "replicated", "User:alice", AclOperation.READ))
    mod = kio_compat.schema_module("fetch", 12, "request")

    def fetch(user: str, replica_id: int) -> tuple[int, int]:
        with SaslRaw(b.addr("SASL_PLAINTEXT")) as c:
            assert c.login_plain(user, USERS[user]).error_code == 0
            part = kio_compat.build(mod.FetchPartition, partition=0, fetch_offset=0,
                                    partition_max_bytes=1 << 20, current_leader_epoch=-1,
                                    log_start_offset=-1, last_fetched_epoch=-1)
            topic = kio_compat.build(mod.FetchTopic, topic="replicated", partitions=(part,))
            req = kio_compat.build(
                mod.FetchRequest, replica_id=replica_id, max_wait=kio_compat.ms_to_timedelta(0),
                min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=(topic,), forgotten_topics_data=(), rack_id="")
            p = c.request(req).responses[0].partitions[0]
            return int(p.error_code), len(p.records or b"")

    assert fetch("alice", -1)[0] == 0 and fetch("alice", -1)[1] > 0  # a consumer may read
    err, size = fetch("alice", 1)  # claiming to be broker 1
    assert err == 29 and size == 0
    assert fetch("admin", 1)[0] == 0  # a super user (the brokers' principal) may


def test_acls_survive_a_restart(b):
    create(b, acl(ResourceType.TOPIC, "durable", "User:bob", AclOperation.WRITE))
    make_topics(b, "durable")
    b.restart()
    assert produce(conf(b, "bob"), "durable", [b"still allowed"]) == [None]
