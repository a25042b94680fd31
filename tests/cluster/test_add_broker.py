"""`yak cluster add-broker` (issue 23, "Brokers joining and leaving", local harness): one
more real broker process in a running 3-broker cluster, with the next node id, the
settings `up` was given and its own rack; then `status`, `stop` and `start-broker` know it,
a topic created afterwards places replicas and leaders on it and serves through it, and the
controller's node_add balancing (the default partition.autobalancing.mode) moves replicas
of a topic created before onto it."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.test_cli_cluster import _yak
from yak.chaos.env import pick_base_port


def _replicas(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int]]]:
    t = admin.list_topics(topic, timeout=10).topics[topic]
    return {p: (pm.leader, list(pm.replicas)) for p, pm in t.partitions.items()}


@pytest.mark.slow
def test_add_broker_joins_the_local_cluster(tmp_path: Path) -> None:
    d = tmp_path / "yc"
    # Outside the ephemeral range: broker 4's ports stay unbound until add-broker, and an
    # outgoing connection could be given one of them meanwhile.
    base = pick_base_port()
    up = _yak("cluster", "up", "-n", "3", "--dir", str(d), "--base-port", str(base),
              "--set", "log.segment.bytes=1048576")
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        bootstrap = f"127.0.0.1:{base}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("before", 6, 2)])["before"].result(30)

        t0 = time.monotonic()
        added = _yak("cluster", "add-broker", "--dir", str(d), "--rack", "r4")
        assert added.returncode == 0, added.stderr[-2000:]
        assert time.monotonic() - t0 < 60
        assert f"added broker 4 on 127.0.0.1:{base + 3}" in added.stdout, added.stdout

        # The same settings as the others, its own node id, ports and rack.
        state = json.loads((d / "cluster.json").read_text())
        procs = {p["name"]: p for p in state["processes"]}
        b4 = procs["broker-4"]
        assert b4["ports"] == [base + 3, base + 8]
        assert "node.id=4" in b4["argv"] and "broker.rack=r4" in b4["argv"]
        assert "log.segment.bytes=1048576" in b4["argv"]
        assert b4["argv"][b4["argv"].index("--metadata") + 1] == \
            procs["broker-1"]["argv"][procs["broker-1"]["argv"].index("--metadata") + 1]

        st = _yak("cluster", "status", "--dir", str(d))
        assert st.returncode == 0, st.stderr
        running = [line.split()[0] for line in st.stdout.splitlines()
                   if line.startswith("broker-") and "running" in line]
        assert running == ["broker-1", "broker-2", "broker-3", "broker-4"], st.stdout
        desc = admin.describe_cluster().result(10)
        assert {n.id: n.rack for n in desc.nodes}[4] == "r4"

        # A topic created now uses broker 4: replicas and leadership, and it serves data.
        admin.create_topics([NewTopic("after", 8, 3)])["after"].result(30)
        after = _replicas(admin, "after")
        assert sum(4 in reps for _l, reps in after.values()) >= 4, after
        led = [p for p, (leader, _r) in after.items() if leader == 4]
        assert led, after
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(100):
            p.produce("after", b"v%d" % i, partition=led[0])
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{base + 3}", "group.id": "g4",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("after", led[0], 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(100, 1.0) if m.error() is None]
        c.close()
        assert got == [b"v%d" % i for i in range(100)]

        # node_add (the default mode): the controller moves replicas of the older topic
        # onto the new broker (BALBYTES owns the balancer; this only checks it runs).
        deadline = time.monotonic() + 60
        while not any(4 in reps for _l, reps in _replicas(admin, "before").values()):
            assert time.monotonic() < deadline, _replicas(admin, "before")
            time.sleep(1)

        # start-broker and stop know the added broker.
        os.kill(b4["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{b4['pid']}").exists() and \
                Path(f"/proc/{b4['pid']}/stat").read_text().split(") ", 1)[1][0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        again = _yak("cluster", "start-broker", "4", "--dir", str(d))
        assert again.returncode == 0, again.stderr[-2000:]
        assert f"started broker-4 on 127.0.0.1:{base + 3}" in again.stdout, again.stdout
        stop = _yak("cluster", "stop", "--dir", str(d))
        assert stop.returncode == 0, stop.stderr
        st = _yak("cluster", "status", "--dir", str(d))
        states = {line.split()[0]: line.split()[2] for line in st.stdout.splitlines()
                  if line.startswith(("broker-", "etcd"))}
        assert states == {"etcd1": "stopped", **{f"broker-{i}": "stopped" for i in range(1, 5)}}
        # Adding to a stopped cluster is refused: one line, nothing started.
        refused = _yak("cluster", "add-broker", "--dir", str(d))
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert "etcd" in refused.stderr and "broker-5" not in (d / "cluster.json").read_text()
    finally:
        _yak("cluster", "stop", "--dir", str(d))


def test_add_broker_without_a_cluster_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """No cluster in the directory: exit 2."""
    r = _yak("cluster", "add-broker", "--dir", str(tmp_path / "none"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "no local cluster" in r.stderr


def test_a_cluster_recorded_before_settings_were_adds_brokers_with_its_settings(
        tmp_path: Path) -> None:
    """cluster.json written by an older `up` has no `broker_settings`: they are taken from
    the first broker's command (not its node id or rack), so broker 2 gets them too."""
    from yak.devcluster.local import LocalCluster

    argv1 = [sys.executable, "-m", "yak.cli.main", "serve", "--data-dir", "d1",
             "--set", "node.id=1", "--set", "broker.rack=a", "--set", "num.partitions=3"]
    etcd = ["/usr/bin/etcd", "--name", "etcd1"]
    state = {"base_port": 30000, "brokers": 1, "etcd_members": 1, "namespace": "default",
             "etcd": ["etcd1"],
             "processes": [
                 {"name": "etcd1", "argv": etcd, "log": "e", "ports": [30010, 30013], "pid": 0},
                 {"name": "broker-1", "argv": argv1, "log": "b", "ports": [30000, 30005],
                  "pid": 0}]}
    (tmp_path / "cluster.json").write_text(json.dumps(state))
    cluster = LocalCluster.load(tmp_path)
    assert cluster.broker_settings == ["num.partitions=3"]
    b2 = cluster.broker_process(2)
    assert b2.ports == [30001, 30006]
    sets = [v for f, v in zip(b2.argv, b2.argv[1:], strict=False) if f == "--set"]
    assert sets == ["node.id=2", "num.partitions=3"]
    assert b2.argv[b2.argv.index("--metadata") + 1] == "etcd://127.0.0.1:30010/default"
