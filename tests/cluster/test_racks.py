"""Racks (issue 23) through the local harness and real brokers on etcd: `yak cluster up -n 4
--racks a,b,c` gives brokers 1..4 the racks a, b, c, a; Metadata reports them; the
replicas of every partition CreateTopics and CreatePartitions place are on three distinct
racks (Kafka's rack-aware assignment: a rack-unaware round robin over 1..4 would put
brokers 1 and 4, both in rack a, together); and `yak cluster decommission` plans each
move into a rack the partition's other replicas do not use, even onto a busier broker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.cluster.test_cli_cluster import _free_block, _yak

T = 30.0
RACKS = {1: "a", 2: "b", 3: "c", 4: "a"}


@pytest.mark.slow
def test_racks_in_the_harness_and_in_placement(tmp_path: Path) -> None:
    d = tmp_path / "yc"
    base = _free_block()
    up = _yak("cluster", "up", "-n", "4", "--racks", "a,b,c", "--dir", str(d),
              "--base-port", str(base))
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(4))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        nodes = admin.describe_cluster().result(T).nodes
        assert {n.id: n.rack for n in nodes} == RACKS

        admin.create_topics([NewTopic("spread", 12, 3)])["spread"].result(T)
        admin.create_partitions([NewPartitions("spread", 20)])["spread"].result(T)
        md = admin.list_topics("spread", timeout=T).topics["spread"].partitions
        assert len(md) == 20
        for p, pm in md.items():
            assert len(pm.replicas) == 3
            assert {RACKS[b] for b in pm.replicas} == {"a", "b", "c"}, (p, pm.replicas)

        # Draining broker 3 (rack c): dr/0's other replica is broker 1 (rack a); broker 4
        # (rack a) holds nothing, broker 2 (rack b) is busier, and is chosen for its rack.
        admin.create_topics([
            NewTopic("dr", 1, replica_assignment=[[3, 1]]),
            NewTopic("busy", 3, replica_assignment=[[2, 1], [2, 1], [2, 1]]),
        ])["dr"].result(T)
        admin.delete_topics(["spread"])["spread"].result(T)  # only dr moves
        r = _yak("cluster", "decommission", "3", "--bootstrap", bootstrap)
        assert r.returncode == 0, r.stderr + r.stdout
        assert "dr/0: moving to replicas 2,1" in r.stdout, r.stdout
    finally:
        _yak("cluster", "stop", "--dir", str(d))
