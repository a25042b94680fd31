"""Dynamic broker configs (issue 23) through real clients against real `yak serve`
processes: confluent-kafka's and kafka-python's admin clients describe, alter and
incrementally alter BROKER resources (one broker, or the cluster-wide default), the
changes take effect without a restart, survive one, and reach every broker of a
two-broker etcd cluster."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from yak.protocol.kio_compat import schema_module

from .kafka_wire import call

pytestmark = [pytest.mark.filterwarnings("ignore:alter_configs has been deprecated"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

T = 15  # seconds: generous for a shared 2-core machine
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
BIG = 60_000  # bytes: one record over the lowered message.max.bytes below


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def describe(a: AdminClient, name: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.BROKER, name)
    return a.describe_configs([res])[res].result(T)


def incremental(a: AdminClient, name: str, *entries: tuple[str, str | None, AlterConfigOpType],
                validate_only: bool = False) -> int | None:
    """Kafka error code of one IncrementalAlterConfigs on a BROKER resource (None: ok)."""
    res = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries])
    try:
        a.incremental_alter_configs([res], validate_only=validate_only)[res].result(T)
        return None
    except KafkaException as e:
        return e.args[0].code()


# No Python client can name the cluster-wide default (the BROKER resource with the empty
# name: librdkafka refuses an empty name, kafka-python and aiokafka route broker resources
# by int(name)); Kafka's own kafka-configs --entity-default sends exactly these requests.
def incremental_default(bootstrap: str, *entries: tuple[str, str | None, AlterConfigOpType],
                        validate_only: bool = False, name: str = "") -> int | None:
    m = schema_module("incremental_alter_configs", 1, "request")
    r = call(bootstrap, m.IncrementalAlterConfigsRequest(resources=(m.AlterConfigsResource(
        resource_type=4, resource_name=name, configs=tuple(
            m.AlterableConfig(name=k, config_operation=op.value, value=v)
            for k, v, op in entries)),), validate_only=validate_only))
    (res,) = r.responses
    return None if res.error_code == 0 else int(res.error_code)


def replace_default(bootstrap: str, configs: dict[str, str]) -> int | None:
    """The legacy AlterConfigs: the default's whole set replaced."""
    m = schema_module("alter_configs", 2, "request")
    r = call(bootstrap, m.AlterConfigsRequest(resources=(m.AlterConfigsResource(
        resource_type=4, resource_name="", configs=tuple(
            m.AlterableConfig(name=k, value=v) for k, v in configs.items())),),
        validate_only=False))
    (res,) = r.responses
    return None if res.error_code == 0 else int(res.error_code)


def describe_default(bootstrap: str) -> dict[str, tuple[str | None, int]]:
    m = schema_module("describe_configs", 4, "request")
    r = call(bootstrap, m.DescribeConfigsRequest(resources=(m.DescribeConfigsResource(
        resource_type=4, resource_name="", configuration_keys=None),),
        include_synonyms=True, include_documentation=False))
    (res,) = r.results
    assert res.error_code == 0
    return {c.name: (c.value, int(c.config_source)) for c in res.configs}


def produce_error(bootstrap: str, topic: str, size: int, acks: str = "all") -> int | None:
    """The error code of producing one record of `size` bytes (None: acknowledged)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": acks,
                  "message.max.bytes": 10_000_000, "retries": 0,
                  "message.timeout.ms": 10_000})
    out: list[KafkaError | None] = []
    p.produce(topic, value=b"x" * size, on_delivery=lambda err, _m: out.append(err))
    assert p.flush(T) == 0
    return None if out[0] is None else out[0].code()


def wait_until(check, timeout: float = T) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


def test_describe_and_alter_one_broker_and_the_default(broker_factory) -> None:
    broker = broker_factory(num_partitions=2)
    a = admin(broker.bootstrap)
    cfg = describe(a, "1")
    e = cfg["num.partitions"]
    assert (e.value, e.source, e.is_read_only) == (
        "2", ConfigSource.STATIC_BROKER_CONFIG.value, False)
    assert cfg["node.id"].is_read_only and cfg["log.dirs"].is_read_only
    assert not cfg["leader.replication.throttled.rate"].is_read_only
    # The cluster-wide default, then this broker's own: Kafka's precedence and sources.
    assert incremental_default(broker.bootstrap, ("num.partitions", "3", SET)) is None
    assert describe(a, "1")["num.partitions"].value == "3"
    a.create_topics([NewTopic("by-default")])["by-default"].result(T)
    assert len(a.list_topics(timeout=T).topics["by-default"].partitions) == 3
    assert incremental(a, "1", ("num.partitions", "5", SET)) is None
    e = describe(a, "1")["num.partitions"]
    assert (e.value, e.source) == ("5", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert describe_default(broker.bootstrap) == {
        "num.partitions": ("3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)}
    # DELETE drops this broker's value: the cluster default shows through again.
    assert incremental(a, "1", ("num.partitions", None, DELETE)) is None
    e = describe(a, "1")["num.partitions"]
    assert (e.value, e.source) == ("3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    # Throttles: stored and described; 0 or a negative rate is INVALID_CONFIG.
    assert incremental(a, "1", ("leader.replication.throttled.rate", "20000000", SET),
                       ("follower.replication.throttled.rate", "10000000", SET)) is None
    cfg = describe(a, "1")
    assert cfg["leader.replication.throttled.rate"].value == "20000000"
    assert cfg["follower.replication.throttled.rate"].source == \
        ConfigSource.DYNAMIC_BROKER_CONFIG.value
    for bad in ("0", "-5", "fast"):
        assert incremental(a, "1", ("leader.replication.throttled.rate", bad, SET)) == \
            KafkaError.INVALID_CONFIG
    # A read-only key: INVALID_REQUEST, and the message names it.
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.dirs", "/tmp/elsewhere", incremental_operation=SET)])
    with pytest.raises(KafkaException) as ei:
        a.incremental_alter_configs([res])[res].result(T)
    assert ei.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "log.dirs" in ei.value.args[0].str()
    # validate_only changes nothing.
    assert incremental_default(broker.bootstrap, ("log.retention.ms", "1000", SET),
                               validate_only=True) is None
    assert describe(a, "1")["log.retention.ms"].source != \
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    # A name that is no broker setting; another broker's resource sent to this one.
    assert incremental(a, "1", ("no.such.setting", "1", SET)) == KafkaError.INVALID_CONFIG
    assert incremental_default(broker.bootstrap, ("num.partitions", "3", SET), name="7") == \
        KafkaError.INVALID_REQUEST


def test_live_effects_and_restart_survival(broker_factory) -> None:
    broker = broker_factory()
    a = admin(broker.bootstrap)
    a.create_topics([NewTopic("big", 1, 1)])["big"].result(T)
    assert produce_error(broker.bootstrap, "big", BIG) is None
    # message.max.bytes lowered for the cluster: the next big record is refused, no restart.
    assert incremental_default(broker.bootstrap, ("message.max.bytes", "50000", SET)) is None
    assert produce_error(broker.bootstrap, "big", BIG) == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce_error(broker.bootstrap, "big", 1000) is None
    topic = a.describe_configs([r := ConfigResource(ResourceType.TOPIC, "big")])[r].result(T)
    assert (topic["max.message.bytes"].value, topic["max.message.bytes"].source) == (
        "50000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    # min.insync.replicas default raised above the one replica: acks=all is refused.
    assert incremental(a, "1", ("min.insync.replicas", "2", SET)) is None
    assert produce_error(broker.bootstrap, "big", 10) == KafkaError.NOT_ENOUGH_REPLICAS
    assert produce_error(broker.bootstrap, "big", 10, acks="1") is None
    assert incremental(a, "1", ("min.insync.replicas", None, DELETE)) is None
    assert produce_error(broker.bootstrap, "big", 10) is None
    # Both layers survive a restart (the local KV in the data dir) and still apply.
    assert incremental(a, "1", ("auto.leader.rebalance.enable", "false", SET)) is None
    broker.restart()
    a = admin(broker.bootstrap)
    cfg = describe(a, "1")
    assert (cfg["message.max.bytes"].value, cfg["message.max.bytes"].source) == (
        "50000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert (cfg["auto.leader.rebalance.enable"].value,
            cfg["auto.leader.rebalance.enable"].source) == (
        "false", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert produce_error(broker.bootstrap, "big", BIG) == KafkaError.MSG_SIZE_TOO_LARGE
    # The legacy AlterConfigs replaces the whole set: an empty one clears the default.
    assert replace_default(broker.bootstrap, {}) is None
    assert produce_error(broker.bootstrap, "big", BIG) is None
    assert describe(a, "1")["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_retention_default_changed_live(broker_factory) -> None:
    """New log.segment.bytes/log.retention.bytes defaults reach a topic without its own
    values at once: segments roll smaller and the oldest are deleted."""
    broker = broker_factory()
    a = admin(broker.bootstrap)
    a.create_topics([NewTopic("ret", 1, 1)])["ret"].result(T)
    assert incremental_default(broker.bootstrap, ("log.segment.bytes", "4096", SET),
                               ("log.retention.bytes", "8192", SET)) is None
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(40):
        p.produce("ret", value=b"r" * 1000)
        p.flush(T)  # one batch per record: the segments roll at 4 KiB
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ret-check"})
    try:
        def earliest() -> int:
            low, _high = c.get_watermark_offsets(TopicPartition("ret", 0), timeout=T)
            return low

        wait_until(lambda: earliest() > 0)  # retention runs once a second
        _low, high = c.get_watermark_offsets(TopicPartition("ret", 0), timeout=T)
        assert high == 40 and high - earliest() <= 20
    finally:
        c.close()


def test_kafka_python_admin_and_broker_loggers(broker) -> None:
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        # kafka-python checks a key is dynamic (not read-only) before altering it.
        r = a.alter_configs([KpResource(ConfigResourceType.BROKER, "1",
                                        configs={"log.retention.ms": "3600000"})])
        assert r == {"broker": {"1": "OK"}}
        desc = a.describe_configs([KpResource(ConfigResourceType.BROKER, "1")],
                                  include_synonyms=True)["broker"]["1"]
        assert desc["log.retention.ms"]["value"] == "3600000"
        assert desc["log.retention.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
        assert [(s["name"], s["value"], s["source"]) for s in
                desc["log.retention.ms"]["synonyms"]] == [
            ("log.retention.ms", "3600000", "DYNAMIC_BROKER_CONFIG"),
            ("log.retention.hours", "168", "DEFAULT_CONFIG"),
        ]
        with pytest.raises(ValueError, match="node.id"):  # read-only: not offered
            a.alter_configs([KpResource(ConfigResourceType.BROKER, "1",
                                        configs={"node.id": "7"})])
        r = a.alter_configs([KpResource(ConfigResourceType.BROKER, "1",
                                        configs={"node.id": "7"})], raise_on_unknown=False)
        assert "node.id" in r["broker"]["1"] and "InvalidRequest" in r["broker"]["1"]
        # Log levels (KIP-412): describe, set, unset.
        loggers = KpResource(ConfigResourceType.BROKER_LOGGER, "1")
        desc = a.describe_configs([loggers], config_filter="all")["broker_logger"]["1"]
        assert "root" in desc and "yak.cluster.node" in desc
        r = a.alter_configs([KpResource(ConfigResourceType.BROKER_LOGGER, "1",
                                        configs={"yak.cluster.node": "DEBUG"})])
        assert r == {"broker_logger": {"1": "OK"}}
        desc = a.describe_configs([loggers], config_filter="all")["broker_logger"]["1"]
        assert desc["yak.cluster.node"]["value"] == "DEBUG"
        r = a.alter_configs([KpResource(ConfigResourceType.BROKER_LOGGER, "1",
                                        configs={"yak.cluster.node": "LOUD"})])
        assert "InvalidConfiguration" in r["broker_logger"]["1"]
        r = a.alter_configs([KpResource(ConfigResourceType.BROKER_LOGGER, "1",
                                        configs={"yak.cluster.node": ("DELETE", None)})])
        desc = a.describe_configs([loggers], config_filter="all")["broker_logger"]["1"]
        assert desc["yak.cluster.node"]["value"] == desc["root"]["value"]
    finally:
        a.close()


def test_cluster_default_reaches_both_brokers(cluster_factory) -> None:  # noqa: F811
    c = cluster_factory(2)
    a1, a2 = admin(c[1].bootstrap), admin(c[2].bootstrap)
    a1.create_topics([NewTopic("wide", 2, replica_assignment=[[1], [2]])])["wide"].result(T)
    wait_until(lambda: produce_error(c.bootstrap, "wide", BIG) is None)
    # Changed through broker 1; broker 2 follows it through the metadata watch.
    assert incremental_default(c[1].bootstrap, ("message.max.bytes", "50000", SET)) is None
    wait_until(lambda: describe(a2, "2")["message.max.bytes"].value == "50000")
    assert describe(a2, "2")["message.max.bytes"].source == \
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    for partition in (0, 1):  # led by broker 1 and broker 2
        p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0, "retries": 0,
                      "message.max.bytes": 10_000_000})
        out: list[KafkaError | None] = []
        p.produce("wide", value=b"x" * BIG, partition=partition,
                  on_delivery=lambda err, _m, out=out: out.append(err))
        assert p.flush(T) == 0
        assert out[0] is not None and out[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    # One broker's own value stays its own.
    assert incremental(a2, "2", ("message.max.bytes", "2000000", SET)) is None
    assert describe(a2, "2")["message.max.bytes"].value == "2000000"
    # A later default change seen by broker 1 means its image is past broker 2's write.
    assert incremental_default(c[2].bootstrap, ("num.partitions", "4", SET)) is None
    wait_until(lambda: describe(a1, "1")["num.partitions"].value == "4")
    assert describe(a1, "1")["message.max.bytes"].value == "50000"
    # Concurrent changes of the one default document through both brokers: every one is
    # kept (compare-and-set, re-read and re-applied on a conflict).
    from concurrent.futures import ThreadPoolExecutor

    names = [f"log.cleaner.{k}" for k in ("delete.retention.ms", "min.compaction.lag.ms")]
    jobs = [(c[1 + i % 2].bootstrap, names[i % 2] if i < 2 else "log.retention.ms", str(1000 + i))
            for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        codes = list(pool.map(lambda j: incremental_default(j[0], (j[1], j[2], SET)), jobs))
    assert codes == [None] * 6
    stored = describe_default(c[1].bootstrap)
    assert stored["log.cleaner.delete.retention.ms"][0] == "1000"
    assert stored["log.cleaner.min.compaction.lag.ms"][0] == "1001"
    assert stored["log.retention.ms"][0] in {"1002", "1003", "1004", "1005"}
    assert {"message.max.bytes", "num.partitions"} <= set(stored)


def test_auto_leader_rebalance_switched_on_live(cluster_factory) -> None:  # noqa: F811
    """Started with preferred-leader balancing off, a broker back from a crash leads
    nothing; the cluster default turned on, the controller hands its partitions back."""
    from tests.cluster.test_cluster_metadata import _metadata

    c = cluster_factory(2, **{"auto.leader.rebalance.enable": "false",
                              "leader.imbalance.check.interval.seconds": "1"})
    a = admin(c.bootstrap)
    a.create_topics([NewTopic("pref", 2, replica_assignment=[[1, 2], [1, 2]])])["pref"].result(T)
    wait_until(lambda: produce_error(c.bootstrap, "pref", 10) is None)
    c[1].kill()
    wait_until(lambda: all(p[1] == 2 for p in _metadata(c[2].bootstrap, "pref")[2]))
    c[1].start()
    wait_until(lambda: all(set(p[4]) == {1, 2} for p in _metadata(c[2].bootstrap, "pref")[2]))
    # A window of 3 imbalance checks: with balancing off, leadership stays on broker 2.
    time.sleep(3)
    assert all(p[1] == 2 for p in _metadata(c[2].bootstrap, "pref")[2])
    assert incremental_default(c[2].bootstrap,
                               ("auto.leader.rebalance.enable", "true", SET)) is None
    wait_until(lambda: all(p[1] == 1 for p in _metadata(c[2].bootstrap, "pref")[2]), 20)


def _keystore(ca, path) -> str:
    """Kafka's one-file PEM keystore (key, certificate, CA) for 127.0.0.1."""
    cert = ca.issue_cert("localhost", "127.0.0.1")
    path.write_bytes(cert.private_key_pem.bytes()
                     + b"".join(b.bytes() for b in cert.cert_chain_pems) + ca.cert_pem.bytes())
    return str(path)


def _handshake(port: int, ca_file: str) -> str | None:
    """None if a TLS client trusting only `ca_file` completes a handshake, else why not."""
    import socket
    import ssl

    ctx = ssl.create_default_context(cafile=ca_file)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=T) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
            return None
    except ssl.SSLCertVerificationError as e:
        return e.verify_message


def test_listener_keystore_swapped_without_restart(tmp_path) -> None:
    """listener.name.ssl.ssl.keystore.location changed on the broker: the next handshakes
    present the new certificate; a missing file, a listener without TLS, the cluster
    default and a secret are refused before anything is stored."""
    import trustme

    from tests.conftest import YakBroker, free_port

    old_ca, new_ca = trustme.CA(), trustme.CA()
    (tmp_path / "old-ca.pem").write_bytes(old_ca.cert_pem.bytes())
    (tmp_path / "new-ca.pem").write_bytes(new_ca.cert_pem.bytes())
    old_ks = _keystore(old_ca, tmp_path / "old.pem")
    new_ks = _keystore(new_ca, tmp_path / "new.pem")
    plain, tls = free_port(), free_port()
    data = tmp_path / "data"
    data.mkdir()
    b = YakBroker(data, {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
                         "ssl.keystore.type": "PEM", "ssl.keystore.location": old_ks},
                  port=plain).start()
    try:
        assert _handshake(tls, str(tmp_path / "old-ca.pem")) is None
        assert _handshake(tls, str(tmp_path / "new-ca.pem")) is not None
        a = admin(b.bootstrap)
        key = "listener.name.ssl.ssl.keystore.location"
        assert incremental(a, "1", (key, str(tmp_path / "missing.pem"), SET)) == \
            KafkaError.INVALID_CONFIG
        assert incremental(a, "1", ("listener.name.plaintext.ssl.keystore.location", new_ks,
                                    SET)) == KafkaError.INVALID_CONFIG
        assert incremental_default(b.bootstrap, (key, new_ks, SET)) == KafkaError.INVALID_REQUEST
        assert incremental(a, "1", ("listener.name.ssl.ssl.key.password", "pw", SET)) == \
            KafkaError.INVALID_REQUEST
        assert incremental(a, "1", ("ssl.keystore.location", new_ks, SET)) == \
            KafkaError.INVALID_REQUEST
        assert _handshake(tls, str(tmp_path / "old-ca.pem")) is None  # nothing changed
        assert incremental(a, "1", (key, new_ks, SET)) is None
        assert _handshake(tls, str(tmp_path / "new-ca.pem")) is None
        assert _handshake(tls, str(tmp_path / "old-ca.pem")) is not None
        e = describe(a, "1")[key]
        assert (e.value, e.source, e.is_read_only) == (
            new_ks, ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
        # librdkafka over the listener, trusting only the new CA.
        ssl_admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{tls}",
                                 "security.protocol": "SSL",
                                 "ssl.ca.location": str(tmp_path / "new-ca.pem")})
        assert 1 in ssl_admin.list_topics(timeout=T).brokers
        # It stays across a restart; DELETE goes back to the static keystore.
        b.restart()
        assert _handshake(tls, str(tmp_path / "new-ca.pem")) is None
        assert incremental(admin(b.bootstrap), "1", (key, None, DELETE)) is None
        assert _handshake(tls, str(tmp_path / "old-ca.pem")) is None
    finally:
        b.stop()
        b.kill()
