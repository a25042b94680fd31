"""`yak partitions reassign` (Kafka's reassignment JSON) and `yak cluster elect-leaders`
(issue 23) as an operator runs them, against real brokers on real etcd: librdkafka
produces with acks=all and reads everything back, confluent-kafka's AdminClient reads the
throttle configs (DescribeConfigs) and the replicas and leaders (Metadata).

- generate -> execute --throttle -> verify: the proposal is Kafka's JSON on the listed
  brokers; the throttles are set on the brokers involved and the topic, the data moves,
  --verify exits 0 once every partition is at its target and clears the throttles, and
  every acknowledged record is read from the new replicas;
- a move held pending (its target paused): --verify exits 3, a second --execute is refused
  without --additional, --cancel reverts it, --verify then exits 4; a broker that cannot
  be reached when the throttles are cleared is one line with exit 1, the others cleared;
  bad input is one line with exit 2;
- elect-leaders after a broker restart moves leadership back to the preferred replica.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from tests.cli.test_cli import ok, one_line_error, yak
from tests.cli.test_partitions_cli import T, consume_all, moving, produce_acked, replicas_of
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 - fixtures
from tests.waiting import wait_until

RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def dynamic_configs(bootstrap: str, kind: ResourceType, name: str, wanted: tuple[str, ...]
                    ) -> dict[str, str]:
    """The keys set dynamically on a broker or topic (DescribeConfigs), key -> value."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(kind, name)
    got = admin.describe_configs([res])[res].result(T)
    return {k: got[k].value for k in wanted
            if k in got and not got[k].is_default and got[k].value not in (None, "")}


def write(path: Path, doc: object) -> str:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def reassign(*args: str) -> subprocess.CompletedProcess:
    return yak("partitions", "reassign", *args)


def test_generate_execute_throttle_verify_moves_the_data(cluster_factory,  # noqa: F811
                                                         tmp_path: Path) -> None:
    c = cluster_factory(3)
    via = ["--bootstrap", c[1].bootstrap]
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    admin.create_topics([NewTopic("ra", 2, replica_assignment=[[1, 2], [2, 1]])])["ra"] \
        .result(T)
    acked = produce_acked(c[1].bootstrap, "ra", 2, 300)
    assert len(acked) == 600

    topics = write(tmp_path / "topics.json", {"version": 1, "topics": [{"topic": "ra"}]})
    out = ok("partitions", "reassign", "--generate", "--topics-to-move-json-file", topics,
             "--broker-list", "2,3", *via).splitlines()
    assert out[0] == "Current partition replica assignment"
    assert json.loads(out[1]) == {"version": 1, "partitions": [
        {"topic": "ra", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": "ra", "partition": 1, "replicas": [2, 1], "log_dirs": ["any", "any"]}]}
    assert out[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(out[4])
    assert [(e["topic"], e["partition"]) for e in proposed["partitions"]] == \
        [("ra", 0), ("ra", 1)]
    assert all(sorted(e["replicas"]) == [2, 3] for e in proposed["partitions"]), proposed
    # --topics and --brokers say the same as the file and --broker-list.
    assert "Proposed partition reassignment configuration" in ok(
        "partitions", "reassign", "--generate", "--topics", "ra", "--brokers", "2,3", *via)

    plan = write(tmp_path / "plan.json", out[4])
    rate = 50_000_000  # bytes/s: far above what the move needs, so it finishes quickly
    r = reassign("--execute", "--reassignment-json-file", plan, "--throttle", str(rate),
                 *via)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[2]) == json.loads(out[1])  # the rollback file
    assert "Save this to use as the --reassignment-json-file option during rollback" in lines
    assert f"The inter-broker throttle limit was set to {rate} B/s on brokers 1,2,3" in lines
    targets = {e["partition"]: e["replicas"] for e in proposed["partitions"]}
    for p, target in targets.items():
        assert f"ra/{p}: moving to replicas {','.join(map(str, target))}" in lines
    # The throttles Kafka's tool sets: the rates on every broker involved, the topic's
    # leader side on the current replicas and its follower side on the added ones.
    for b in (1, 2, 3):
        assert dynamic_configs(c[1].bootstrap, ResourceType.BROKER, str(b), RATES) == \
            dict.fromkeys(RATES, str(rate))
    topic_throttle = dynamic_configs(c[1].bootstrap, ResourceType.TOPIC, "ra", REPLICAS)
    assert topic_throttle[REPLICAS[0]] == "0:1,0:2,1:2,1:1"
    assert topic_throttle[REPLICAS[1]] == ",".join(
        f"{p}:{b}" for p in (0, 1) for b in targets[p] if b == 3)

    def verified() -> bool:
        r = reassign("--verify", "--plan", plan, *via)
        assert r.returncode in (0, 3), r.stderr
        assert r.stdout.startswith("Status of partition reassignment:\n")
        return r.returncode == 0

    wait_until(verified, 60, "--verify says every partition is at its target")
    done = ok("partitions", "reassign", "--verify", "--plan", plan, *via)
    assert "Reassignment of partition ra/0 is complete." in done
    assert "Reassignment of partition ra/1 is complete." in done
    assert "Clearing broker-level throttles on brokers 1,2,3" in done
    assert "Clearing topic-level throttles on topics ra" in done
    for b in (1, 2, 3):
        assert dynamic_configs(c[1].bootstrap, ResourceType.BROKER, str(b), RATES) == {}
    assert dynamic_configs(c[1].bootstrap, ResourceType.TOPIC, "ra", REPLICAS) == {}
    assert replicas_of(c[2].bootstrap, "ra") == targets
    wait_until(lambda: not any(c[1].data_dir.glob("ra-*")), T, "broker 1's copies deleted")
    c[1].stop()
    assert consume_all(c[2].bootstrap, "ra", 2, len(acked)) == acked


@pytest.mark.slow
def test_pending_move_verify_cancel_and_bad_input(cluster_factory,  # noqa: F811
                                                  tmp_path: Path) -> None:
    # A session long enough that broker 2, paused so that it cannot catch up, stays
    # registered (and in Metadata, which the plan is checked against) while its move is
    # verified and cancelled: a minute, for a loaded machine.
    c = cluster_factory(2, **{"broker.session.timeout.ms": "60000"})
    via = ["--bootstrap", c[1].bootstrap]
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    admin.create_topics([NewTopic("ca", 2, replica_assignment=[[1], [1]])])["ca"].result(T)
    assert len(produce_acked(c[1].bootstrap, "ca", 2, 50)) == 100
    plan = write(tmp_path / "plan.json", {"version": 1, "partitions": [
        {"topic": "ca", "partition": 0, "replicas": [2], "log_dirs": ["any"]}]})
    other = write(tmp_path / "other.json", {"version": 1, "partitions": [
        {"topic": "ca", "partition": 1, "replicas": [1, 2]}]})

    os.kill(c[2].pid, signal.SIGSTOP)
    try:
        assert "ca/0: moving to replicas 2" in ok(
            "partitions", "reassign", "--execute", "--plan", plan, *via)
        assert [(m["topic"], m["partition"], m["adding"]) for m in moving(via)] == \
            [("ca", 0, [2])]
        r = reassign("--verify", "--plan", plan, *via)
        assert r.returncode == 3, r.stderr
        assert "Reassignment of partition ca/0 is still in progress." in r.stdout
        assert "Clearing" not in r.stdout  # throttles stay while a move is in progress
        # Kafka's tool refuses a second plan while one runs, unless --additional.
        r = reassign("--execute", "--plan", other, *via)
        one_line_error(r, "1 partition(s) are already being moved (ca/0)", "--additional")
        assert r.returncode == 2

        # Broker 2 is paused: the throttles are left alone (clearing them would ask it).
        r = reassign("--cancel", "--plan", plan, "--preserve-throttles", *via)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "ca/0: move cancelled"
        assert moving(via) == []
        r = reassign("--verify", "--plan", plan, "--preserve-throttles", *via)
        assert r.returncode == 4, r.stderr
        assert ("Reassignment of partition ca/0 failed: no reassignment is active, and its"
                " replicas are 1 rather than 2.") in r.stdout
        assert "Clearing" not in r.stdout
        assert replicas_of(c[1].bootstrap, "ca") == {0: [1], 1: [1]}
        # Cancelling again clears the throttles: broker 1's are, the paused broker's
        # cannot be, and that is one line with exit 1 after the others were tried.
        r = reassign("--cancel", "--plan", plan, *via)
        assert "ca/0: no reassignment in progress" in r.stdout
        assert "Clearing topic-level throttles on topics ca" in r.stdout
        one_line_error(r, "cannot clear the throttle of broker 2")
        assert "throttle of broker 1" not in r.stderr
        assert r.returncode == 1
    finally:
        os.kill(c[2].pid, signal.SIGCONT)
    r = reassign("--cancel", "--plan", plan, *via)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["ca/0: no reassignment in progress",
                                     "Clearing broker-level throttles on brokers 1,2",
                                     "Clearing topic-level throttles on topics ca"]

    def plan_file(name: str, doc: object) -> str:
        return write(tmp_path / f"{name}.json", doc)

    def entry(topic: str, p: int, replicas: list) -> dict:
        return {"version": 1, "partitions": [
            {"topic": topic, "partition": p, "replicas": replicas}]}

    missing = str(tmp_path / "absent.json")
    for args, fragment in [
        (["--execute", "--plan", plan_file("bad", "{\"version\": 1, ")],
         "bad.json: the reassignment file is not valid JSON"),
        (["--execute", "--plan", missing], f"cannot read {missing}: No such file"),
        (["--execute", "--plan", plan_file("unknown", entry("nope", 0, [1]))],
         "cannot reassign: nope/0: UNKNOWN_TOPIC_OR_PARTITION"),
        (["--execute", "--plan", plan_file("nopart", entry("ca", 7, [1]))],
         "cannot reassign: ca/7: UNKNOWN_TOPIC_OR_PARTITION"),
        (["--execute", "--plan", plan_file("dup", entry("ca", 1, [1, 2, 1]))],
         "ca/1: INVALID_REPLICA_ASSIGNMENT: replica 1 is named twice"),
        (["--execute", "--plan", plan_file("nobroker", entry("ca", 1, [1, 9]))],
         "ca/1: INVALID_REPLICA_ASSIGNMENT: broker 9 is not in the cluster (brokers: 1, 2)"),
        (["--execute", "--plan", plan_file("dirs", {"version": 1, "partitions": [
            {"topic": "ca", "partition": 1, "replicas": [1], "log_dirs": ["/d"]}]})],
         "only \"any\" is supported"),
        (["--verify", "--plan", plan, "--throttle", "10"], "--throttle goes with --execute"),
        (["--execute", "--plan", plan, "--throttle", "0"], "--throttle"),
        (["--execute", "--verify", "--plan", plan], "not --execute and --verify"),
        (["--verify"], "--verify needs --reassignment-json-file FILE"),
        (["--generate", "--topics", "ca"], "--generate needs --broker-list"),
        (["--generate", "--topics", "ca", "--brokers", "1,9"],
         "broker 9 is not in the cluster (brokers: 1, 2)"),
        (["--generate", "--topics", "zz", "--brokers", "1,2"],
         "topic 'zz': UNKNOWN_TOPIC_OR_PARTITION"),
        (["--generate", "--topics", "ca", "--brokers", "1,x"], "invalid broker list"),
    ]:
        r = reassign(*args, *via)
        one_line_error(r, fragment)
        assert r.returncode == 2, (args, r.stderr)
    assert moving(via) == []
    # Nothing was throttled by the refused plans.
    assert dynamic_configs(c[1].bootstrap, ResourceType.TOPIC, "ca", REPLICAS) == {}


def _leader(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=T)
    return {p: (pm.leader, sorted(pm.isrs)) for p, pm in md.topics[topic].partitions.items()}


@pytest.mark.slow
def test_elect_leaders_moves_leadership_back_after_a_restart(cluster_factory,  # noqa: F811
                                                             tmp_path: Path) -> None:
    # No automatic rebalance: leadership goes back only by the command.
    c = cluster_factory(3, **{"auto.leader.rebalance.enable": "false"})
    admin = AdminClient({"bootstrap.servers": c[2].bootstrap})
    admin.create_topics([NewTopic("el", 2, replica_assignment=[[1, 2, 3], [2, 3, 1]])])[
        "el"].result(T)
    acked = produce_acked(c[2].bootstrap, "el", 2, 100)
    wait_until(lambda: _leader(c[2].bootstrap, "el") == {0: (1, [1, 2, 3]),
                                                          1: (2, [1, 2, 3])},
               T, "preferred leaders, every replica in sync")

    c[1].stop()
    wait_until(lambda: _leader(c[2].bootstrap, "el")[0][0] in (2, 3), T,
               "el/0 led by another replica while broker 1 is down")
    c[1].start()
    wait_until(lambda: _leader(c[2].bootstrap, "el")[0][1] == [1, 2, 3], 60,
               "broker 1 back in el/0's ISR")
    assert _leader(c[2].bootstrap, "el")[0][0] != 1  # no automatic move back
    via = ["--bootstrap", c[2].bootstrap]

    out = ok("cluster", "elect-leaders", "--topic", "el", *via).splitlines()
    assert out == ["el/0: preferred replica elected leader",
                   "el/1: already led by its preferred replica"]
    wait_until(lambda: _leader(c[2].bootstrap, "el")[0][0] == 1, T,
               "Metadata shows broker 1 leading el/0")
    # Every partition is now led by its preferred replica: the broker answers nothing
    # for --all-topic-partitions (ELECTION_NOT_NEEDED is left out, as in Kafka).
    assert ok("cluster", "elect-leaders", "--all-topic-partitions", *via).strip() == \
        "no partition needed an election"
    parts = write(tmp_path / "el.json", {"partitions": [{"topic": "el", "partition": 1}]})
    assert ok("cluster", "elect-leaders", "--election-type", "PREFERRED",
              "--path-to-json-file", parts, *via).strip() == \
        "el/1: already led by its preferred replica"
    assert ok("cluster", "elect-leaders", "--election-type", "unclean", "--topic", "el",
              "--partition", "0", *via).strip() == "el/0: already has a leader"

    for args, fragment, code in [
        (["--topic", "nope"], "nope: UNKNOWN_TOPIC_OR_PARTITION", 2),
        (["--topic", "el", "--partition", "9"], "el/9: UNKNOWN_TOPIC_OR_PARTITION", 2),
        (["--partition", "0", "--all-topic-partitions"], "--partition goes with --topic", 2),
        ([], "give one of --topic, --all-topic-partitions, --path-to-json-file", 2),
        (["--topic", "el", "--all-topic-partitions"],
         "not --topic and --all-topic-partitions", 2),
        (["--election-type", "random", "--topic", "el"], "invalid --election-type", 2),
        (["--path-to-json-file", write(tmp_path / "bad.json", "{}")],
         'has no "partitions" list', 2),
    ]:
        r = yak("cluster", "elect-leaders", *args, *via)
        one_line_error(r, fragment)
        assert r.returncode == code, (args, r.stderr)

    # A preferred replica that is down is not elected: one line, exit 1.
    c[1].stop()
    wait_until(lambda: _leader(c[2].bootstrap, "el")[0][0] in (2, 3), T, "el/0 moved off 1")
    r = yak("cluster", "elect-leaders", "--topic", "el", "--partition", "0", *via)
    one_line_error(r, "cannot elect leaders: el/0: PREFERRED_LEADER_NOT_AVAILABLE")
    assert r.returncode == 1
    assert consume_all(c[2].bootstrap, "el", 2, len(acked)) == acked
