"""A single broker's data dir of before the one metadata path opens with today's broker.

`fixtures/single-broker-962f12c/` was written by `yak serve` of commit 962f12c (the last
with `LocalMetadataStore`), by `fixtures/make_single_broker_dir.py`: topics with configs in
`__yak_metadata.json`, records in their logs, a SCRAM user, an ACL and a quota in the
security files. A copy is started with today's code (a one-node cluster on `LocalKV`) and
read through confluent-kafka: same cluster id, topics, partitions, configs, records, user,
ACL and quota; then it is restarted, to show the migrated store is what it opens next time
(the old files unused), and a new topic is created and survives that restart.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramMechanism,
)

from tests.cluster.fixtures.make_single_broker_dir import GROWN_TO, RECORDS, TOPICS
from tests.conftest import YakBroker, free_port

FIXTURE = Path(__file__).parent / "fixtures" / "single-broker-962f12c"


def _records(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{time.time()}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.time() + 20
        while len(out) < RECORDS and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                out.append(m.value())
        return out
    finally:
        c.close()


def _check(bootstrap: str, cluster_id: str, created: dict[str, int] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=10)
    assert md.cluster_id == cluster_id
    partitions = dict(TOPICS, grown=GROWN_TO)
    assert {t: len(m.partitions) for t, m in md.topics.items()
            if not t.startswith("__")} == dict(partitions, **(created or {}))
    for topic, n in partitions.items():
        assert all(p.leader == 1 and p.error is None
                   for p in md.topics[topic].partitions.values()), md.topics[topic].partitions
        got = _records(bootstrap, topic, n)
        assert sorted(got) == sorted(f"{topic}-{i}".encode() for i in range(RECORDS))
    res = [ConfigResource(ResourceType.TOPIC, "orders"),
           ConfigResource(ResourceType.TOPIC, "compacted")]
    configs = {r.name: f.result(10) for r, f in admin.describe_configs(res).items()}
    assert configs["orders"]["retention.ms"].value == "3153600000000"
    assert not configs["orders"]["retention.ms"].is_default
    assert configs["orders"]["max.message.bytes"].value == "65536"
    assert configs["compacted"]["cleanup.policy"].value == "compact"
    users = {u: f.result(10)
             for u, f in admin.describe_user_scram_credentials(["alice"]).items()}
    assert [i.mechanism for i in users["alice"].scram_credential_infos] == \
        [ScramMechanism.SCRAM_SHA_256]
    acls = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(10)
    assert [(a.name, a.principal, a.operation) for a in acls] == \
        [("orders", "User:alice", AclOperation.READ)]


def _quota(bootstrap: str) -> str:
    out = subprocess.run([sys.executable, "-m", "yak.cli.main", "quota", "list", "-b",
                          bootstrap], capture_output=True, text=True, timeout=30, check=True)
    return out.stdout


def test_a_data_dir_of_the_single_broker_of_before_opens(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(FIXTURE, data)
    cluster_id = json.loads((data / "__yak_metadata.json").read_text())["cluster_id"]
    # The fixture's records carry the times they were written (2026-11-26): a retention
    # shorter than the fixture's age deletes them at start-up (the first run after
    # 2026-11-27 23:00 found "orders", then at 1 day, empty). So "orders" keeps its own
    # non-default retention of 100 years, and the topics on the broker's default keep
    # everything (log.retention.ms=-1) whatever the date.
    settings = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS", "log.retention.ms": "-1"}
    broker = YakBroker(data, settings, port=free_port()).start()
    try:
        _check(broker.bootstrap, cluster_id)
        assert "alice" in _quota(broker.bootstrap)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("after", 2, 1)]).values():
            f.result(10)
        assert broker.stop() == 0
        assert "migrated" in broker.log()
        broker.start()
        _check(broker.bootstrap, cluster_id, {"after": 2})
        assert broker.log().count("migrated") == 1  # the second start opened the store
    finally:
        broker.stop()
