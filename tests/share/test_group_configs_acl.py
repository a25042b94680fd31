"""GROUP configs under ACLs (issue 24), Kafka's rules: DescribeConfigs on a group needs
DESCRIBE_CONFIGS on that group, IncrementalAlterConfigs and AlterConfigs need
ALTER_CONFIGS; without it the answer is GROUP_AUTHORIZATION_FAILED. One broker with the
StandardAuthorizer (deny by default), users logging in with SASL PLAIN through
confluent-kafka's AdminClient."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)
from security.conftest import certs, plain_users, start_secured  # noqa: F401 - fixture
from security.wire import rdkafka

pytestmark = pytest.mark.timeout(90)

USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def test_group_configs_need_describe_and_alter_configs_on_the_group(tmp_path: Path,
                                                                     certs) -> None:  # noqa: F811
    d = tmp_path / "data"
    d.mkdir()
    b = start_secured(d, ["SASL_PLAINTEXT"], certs, **{
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_users(**USERS),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"})
    try:
        def client(user: str) -> AdminClient:
            return AdminClient(rdkafka(b.addr("SASL_PLAINTEXT"), "SASL_PLAINTEXT", None,
                                       "PLAIN", user, USERS[user]))

        alice, admin = client("alice"), client("admin")
        res = ConfigResource(ResourceType.GROUP, "g")
        change = ConfigResource(ResourceType.GROUP, "g", incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])

        def refused(fn) -> int:
            with pytest.raises(KafkaException) as e:
                fn()
            return e.value.args[0].code()

        def describe(a: AdminClient) -> dict:
            return a.describe_configs([res])[res].result(15)

        def alter(a: AdminClient) -> None:
            a.incremental_alter_configs([change])[change].result(15)

        assert refused(lambda: describe(alice)) == KafkaError.GROUP_AUTHORIZATION_FAILED
        assert refused(lambda: alter(alice)) == KafkaError.GROUP_AUTHORIZATION_FAILED
        for f in admin.create_acls([AclBinding(
                ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:alice", "*",
                AclOperation.DESCRIBE_CONFIGS, AclPermissionType.ALLOW)]).values():
            f.result(15)
        assert describe(alice)["share.auto.offset.reset"].value == "latest"
        assert refused(lambda: alter(alice)) == KafkaError.GROUP_AUTHORIZATION_FAILED
        for f in admin.create_acls([AclBinding(
                ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:alice", "*",
                AclOperation.ALTER_CONFIGS, AclPermissionType.ALLOW)]).values():
            f.result(15)
        alter(alice)
        assert describe(alice)["share.auto.offset.reset"].value == "earliest"
        # another group: still nothing
        other = ConfigResource(ResourceType.GROUP, "h")
        code = refused(lambda: alice.describe_configs([other])[other].result(15))
        assert code == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        try:
            b.stop(10)
        finally:
            b.kill()  # no-op once stopped
