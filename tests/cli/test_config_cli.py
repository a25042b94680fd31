"""`yak config describe|set|delete` (dynamic broker configs, issue 23) against real `yak
serve` processes: what it sets is what confluent-kafka's AdminClient then describes, bad
input is the broker's error in one line with exit 2, `--json` parses; on a two-broker etcd
cluster a broker's own resource reaches that broker through any bootstrap; on a SASL
listener the command's -X login is used and the authorizer's refusal is one line."""

from __future__ import annotations

import json
import time

from confluent_kafka.admin import AdminClient, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.admin import ResourceType as RT
from security.conftest import certs, plain_users, start_secured  # noqa: F401 - fixture

from tests.cli.test_cli import ok, one_line_error, yak
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 - fixtures

T = 15  # seconds: generous for a shared machine


def described(bootstrap: str, rtype: RT, name: str) -> dict[str, ConfigEntry]:
    a = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(rtype, name)
    return a.describe_configs([res])[res].result(T)


def wait_until(check, timeout: float = T) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


def test_set_describe_delete_on_one_broker(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    assert "has no dynamic configs" in ok("config", "describe", "--broker", "1", *b)
    # The cluster-wide default: a real AdminClient describing broker 1 sees it, with
    # Kafka's source for a dynamic default.
    out = ok("config", "set", "--default", "log.retention.ms=3600000", "num.partitions=3", *b)
    assert "set log.retention.ms, num.partitions on the cluster default" in out
    e = described(broker.bootstrap, RT.BROKER, "1")["log.retention.ms"]
    assert (e.value, e.source) == ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    got = json.loads(ok("config", "describe", "--default", "--json", *b))
    assert got["resource"] == {"type": "broker", "name": ""}
    assert {c["name"]: (c["value"], c["source"], c["read_only"]) for c in got["configs"]} == {
        "log.retention.ms": ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG", False),
        "num.partitions": ("3", "DYNAMIC_DEFAULT_BROKER_CONFIG", False)}
    # The broker's own value wins over the default; the table shows both sources.
    ok("config", "set", "--broker", "1", "num.partitions=5", *b)
    e = described(broker.bootstrap, RT.BROKER, "1")["num.partitions"]
    assert (e.value, e.source) == ("5", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    table = ok("config", "describe", "--broker", "1", *b)
    assert "KEY" in table and "SOURCE" in table and "READ-ONLY" in table
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[1:]}
    assert rows["num.partitions"] == ["5", "DYNAMIC_BROKER_CONFIG", "no"]
    assert rows["log.retention.ms"] == ["3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG", "no"]
    # Named keys are shown whatever their source, read-only ones marked so; synonyms in
    # --json are the chain the value overrides.
    got = json.loads(ok("config", "describe", "--broker", "1", "log.dirs", "num.partitions",
                        "--json", *b))
    by_name = {c["name"]: c for c in got["configs"]}
    assert by_name["log.dirs"]["read_only"] is True
    assert by_name["log.dirs"]["source"] == "STATIC_BROKER_CONFIG"
    assert [s["source"] for s in by_name["num.partitions"]["synonyms"]] == [
        "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "DEFAULT_CONFIG"]
    assert len(json.loads(ok("config", "describe", "--broker", "1", "--all", "--json",
                             *b))["configs"]) > 50
    # DELETE: the default shows through again.
    assert "deleted num.partitions on broker 1" in ok(
        "config", "delete", "--broker", "1", "num.partitions", *b)
    e = described(broker.bootstrap, RT.BROKER, "1")["num.partitions"]
    assert (e.value, e.source) == ("3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    # --validate-only changes nothing.
    assert "nothing changed" in ok("config", "set", "--default", "num.partitions=9",
                                   "--validate-only", *b)
    assert described(broker.bootstrap, RT.BROKER, "1")["num.partitions"].value == "3"


def test_bad_input_is_the_brokers_error_in_one_line(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    for args, fragments in [
        (("set", "--broker", "1", "log.dirs=/elsewhere"),
         ("cannot set configs of broker 1", "INVALID_REQUEST", "log.dirs")),
        (("set", "--default", "no.such.setting=1"),
         ("the cluster default", "INVALID_CONFIG", "no.such.setting")),
        (("set", "--default", "message.max.bytes=big"),
         ("INVALID_CONFIG", "message.max.bytes", "big")),
        (("set", "--broker", "1", "leader.replication.throttled.rate=0"),
         ("INVALID_CONFIG", "leader.replication.throttled.rate")),
        (("set", "--broker", "7", "num.partitions=2"),
         ("broker 7 is not in the cluster (brokers: 1)",)),
        (("describe", "--broker", "1", "no.such.key"), ("no config named no.such.key",)),
        (("set", "--default", "--broker", "1", "num.partitions=2"), ("exactly one of",)),
        (("set", "--default", "num.partitions"), ("expected KEY=VALUE",)),
    ]:
        r = yak("config", *args, *b)
        one_line_error(r, *fragments)
        assert r.returncode == 2, (args, r.stderr)
    # Nothing of it was stored.
    got = json.loads(ok("config", "describe", "--default", "--json", *b))
    assert got["configs"] == []
    assert described(broker.bootstrap, RT.BROKER, "1")["log.dirs"].value != "/elsewhere"
    # A topic that does not exist, an unreachable broker: failures, exit 1.
    r = yak("config", "describe", "--topic", "absent", *b)
    one_line_error(r, "UNKNOWN_TOPIC_OR_PARTITION")
    assert r.returncode == 1
    from tests.conftest import free_port

    r = yak("config", "describe", "--default", "--bootstrap", f"127.0.0.1:{free_port()}",
            "--timeout", "2")
    one_line_error(r, "cannot connect to broker")
    assert r.returncode == 1


def test_topic_configs(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "orders", *b)
    ok("config", "set", "--topic", "orders", "retention.ms=60000", "cleanup.policy=compact", *b)
    cfg = described(broker.bootstrap, RT.TOPIC, "orders")
    assert (cfg["retention.ms"].value, cfg["retention.ms"].source) == (
        "60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    got = json.loads(ok("config", "describe", "--topic", "orders", "--json", *b))
    assert {c["name"]: c["value"] for c in got["configs"]} == {
        "retention.ms": "60000", "cleanup.policy": "compact"}
    ok("config", "delete", "--topic", "orders", "cleanup.policy", *b)
    assert described(broker.bootstrap, RT.TOPIC, "orders")["cleanup.policy"].source == \
        ConfigSource.DEFAULT_CONFIG.value
    r = yak("config", "set", "--topic", "orders", "retention.ms=soon", *b)
    one_line_error(r, "INVALID_CONFIG", "retention.ms")
    assert r.returncode == 2


def test_two_brokers_on_etcd(cluster_factory) -> None:  # noqa: F811
    c = cluster_factory(2)
    via1 = ["--bootstrap", c[1].bootstrap]
    # The default, set through broker 1, reaches broker 2 through the metadata watch.
    ok("config", "set", "--default", "message.max.bytes=500000", *via1)
    wait_until(lambda: described(c[2].bootstrap, RT.BROKER, "2")["message.max.bytes"].value
               == "500000")
    # Broker 2's own resource, asked through broker 1's address: sent to broker 2 (broker 1
    # refuses another broker's id), as Kafka's AdminClient routes it.
    ok("config", "set", "--broker", "2", "num.partitions=4", *via1)
    e = described(c[2].bootstrap, RT.BROKER, "2")["num.partitions"]
    assert (e.value, e.source) == ("4", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    got = json.loads(ok("config", "describe", "--broker", "2", "--json", *via1))
    assert {x["name"]: (x["value"], x["source"]) for x in got["configs"]} == {
        "message.max.bytes": ("500000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        "num.partitions": ("4", "DYNAMIC_BROKER_CONFIG")}
    # Broker 1 keeps no value of broker 2's: it shows the default only.
    wait_until(lambda: "DYNAMIC_DEFAULT_BROKER_CONFIG" in ok(
        "config", "describe", "--broker", "1", *via1))
    got = json.loads(ok("config", "describe", "--broker", "1", "--json", *via1))
    assert {x["name"]: x["source"] for x in got["configs"]} == {
        "message.max.bytes": "DYNAMIC_DEFAULT_BROKER_CONFIG"}


def test_sasl_login_and_acls(tmp_path, certs) -> None:  # noqa: ANN001, F811
    """The command's -X login reaches the broker; a principal without ALTER_CONFIGS on the
    cluster and a refused login are one line, exit 1 (not bad input)."""
    d = tmp_path / "data"
    d.mkdir()
    broker = start_secured(
        d, ["SASL_PLAINTEXT"], certs,
        **{"sasl.enabled.mechanisms": "PLAIN",
           "listener.name.sasl_plaintext.plain.sasl.jaas.config":
               plain_users(admin="admin-secret", alice="alice-secret"),
           "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin"})
    try:
        bs = ["--bootstrap", broker.addr("SASL_PLAINTEXT")]

        def login(user: str, password: str) -> list[str]:
            return [*bs, "-X", "security.protocol=sasl_plaintext", "-X",
                    "sasl.mechanism=PLAIN", "-X", f"sasl.username={user}", "-X",
                    f"sasl.password={password}"]

        ok("config", "set", "--default", "num.partitions=4", *login("admin", "admin-secret"))
        got = json.loads(ok("config", "describe", "--default", "--json",
                            *login("admin", "admin-secret")))
        assert [(c["name"], c["value"]) for c in got["configs"]] == [("num.partitions", "4")]
        r = yak("config", "set", "--default", "num.partitions=5",
                *login("alice", "alice-secret"))
        one_line_error(r, "CLUSTER_AUTHORIZATION_FAILED")
        assert r.returncode == 1
        r = yak("config", "describe", "--broker", "1", *login("admin", "wrong"))
        one_line_error(r, "cannot describe configs of broker 1", "Invalid username or password")
        assert r.returncode == 1
    finally:
        broker.stop(10)
        broker.kill()
