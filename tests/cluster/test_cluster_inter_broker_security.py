"""Brokers reach each other over a secured inter-broker listener (Kafka's
`inter.broker.listener.name`): replica fetches and transaction markers go over SASL_SSL,
logged in as the broker's own user from that listener's JAAS config.

Three real `yak serve` processes on etcd, each with a PLAINTEXT listener for the test's
clients and a SASL_SSL listener `BROKER` (PLAIN; certificates from trustme) that is the
only way to another broker. The authorizer lets `User:broker` (a super user) do
CLUSTER_ACTION, and denies it to everyone else, so a replica fetch that did not log in
would be refused as well as unencrypted. acks=all writes to partitions led by each broker
need both followers; a transaction over them needs markers sent to the other leaders.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from conftest import YakBroker, _command, free_port
from security.conftest import make_certs

from cluster.conftest import FAST_SESSION, YakCluster

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret";')


def broker_settings(certs_dir: Path) -> tuple[dict[str, str], int]:
    certs = make_certs(certs_dir) if not (certs_dir / "ca.pem").exists() else None
    ca, keystore = certs_dir / "ca.pem", certs_dir / "broker.pem"
    assert certs is None or (certs.ca == ca and certs.broker == keystore)
    client, inter = free_port(), free_port()
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{client},BROKER://127.0.0.1:{inter}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,BROKER:SASL_SSL",
        "inter.broker.listener.name": "BROKER",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.broker.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.broker.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker",
        "allow.everyone.if.no.acl.found": "true",
        "transaction.state.log.replication.factor": "3",
        "offsets.topic.replication.factor": "3",
    }, client


@pytest.mark.slow
def test_replication_and_markers_over_sasl_ssl(etcd, keys, tmp_path: Path) -> None:  # noqa: ANN001
    c = YakCluster(etcd, keys, tmp_path / "cluster", dict(FAST_SESSION))
    try:
        (tmp_path / "certs").mkdir()
        for n in (1, 2, 3):
            settings, port = broker_settings(tmp_path / "certs")
            data_dir = tmp_path / f"broker-{n}"
            data_dir.mkdir()
            # The client port is the PLAINTEXT listener's (the test's clients use it).
            c.brokers[n] = YakBroker(data_dir, {"metadata.store": c.url, "node.id": str(n),
                                                **c.settings, **settings}, port=port).start()
        c.wait_registered()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        # Only the brokers' own user may replicate (super user); nobody else.
        deny = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                          "User:*", "*", AclOperation.CLUSTER_ACTION, AclPermissionType.DENY)
        for f in admin.create_acls([deny]).values():
            f.result(15)
        for f in admin.create_topics([NewTopic("t", 3, 3)]).values():
            f.result(30)

        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                      "enable.idempotence": True, "message.timeout.ms": 20000})
        errors: list = []
        for i in range(300):
            p.produce("t", b"v%d" % i, partition=i % 3,
                      on_delivery=lambda err, msg: errors.append(err) if err else None)
        assert p.flush(40) == 0 and errors == [], errors

        tx = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "ib-tx",
                       "transaction.timeout.ms": 20000})
        tx.init_transactions(30)
        tx.begin_transaction()
        for part in range(3):
            tx.produce("t", b"tx-%d" % part, partition=part)
        tx.commit_transaction(30)

        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "ib-check",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
        cons.subscribe(["t"])
        got: list[bytes] = []
        deadline = time.monotonic() + 40
        while len(got) < 303 and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        cons.close()
        assert len(got) == 303, len(got)
        assert {b"tx-0", b"tx-1", b"tx-2"} <= set(got)
        md = admin.list_topics("t", timeout=10).topics["t"].partitions
        assert all(sorted(pm.isrs) == [1, 2, 3] for pm in md.values()), \
            {p: pm.isrs for p, pm in md.items()}
    finally:
        c.stop()


def test_secured_inter_broker_listener_without_the_brokers_credentials_is_refused(
        etcd, keys, tmp_path: Path) -> None:  # noqa: ANN001
    """A SASL inter-broker listener whose JAAS config has no username/password for the
    broker itself: the broker would never replicate, so it does not start (exit 2, one
    line naming the setting)."""
    (tmp_path / "certs").mkdir()
    settings, port = broker_settings(tmp_path / "certs")
    settings["listener.name.broker.plain.sasl.jaas.config"] = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required'
        ' user_broker="broker-secret";')
    cmd = [*_command(), "--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{port}",
           "--http", "none", "--set", f"metadata.store={etcd.url(keys.namespace)}",
           "--set", "node.id=1"]
    for k, v in settings.items():
        cmd += ["--set", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "inter.broker.listener.name" in lines[0] \
        and 'username="..." password="..."' in lines[0], r.stderr
