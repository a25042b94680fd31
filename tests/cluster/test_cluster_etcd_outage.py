"""etcd unreachable: brokers keep serving the partitions they lead with the ISR they have,
refuse to shrink it (so acks=all never completes without a member of that ISR), say so
once rather than per attempt, and carry on once etcd is back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST_SESSION, YakCluster
from tests.cluster.test_cluster_metadata import _metadata, _wait

T = 20


def _send(p: Producer, values: list[bytes], gap: float = 0.0) -> list[KafkaError | None]:
    outcomes: list[KafkaError | None] = []
    for v in values:
        p.produce("eo", v, on_delivery=lambda e, m: outcomes.append(e))
        p.poll(0)
        if gap:
            time.sleep(gap)  # paces the writes across the outage
    p.flush(40)
    return outcomes


@pytest.mark.slow
def test_brokers_keep_serving_without_etcd_and_never_shrink_isr(
        etcd_factory, keys, tmp_path: Path) -> None:
    etcd = etcd_factory(1)
    c = YakCluster(etcd, keys, tmp_path / "c", {**FAST_SESSION,
                                                "replica.lag.time.max.ms": "3000"})
    try:
        for n in (1, 2, 3):
            c.add(n)
        c.wait_registered()
        a = AdminClient({"bootstrap.servers": c.bootstrap})
        a.create_topics([NewTopic("eo", 1, replica_assignment=[[1, 2, 3]],
                                  config={"min.insync.replicas": "2"})])["eo"].result(T)
        _wait(lambda: _metadata(c[1].bootstrap, "eo")[2], 10, "eo")
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                      "enable.idempotence": True, "message.timeout.ms": 8000,
                      "request.timeout.ms": 5000})
        acked: list[bytes] = []
        assert _send(p, [b"a%d" % i for i in range(50)]) == [None] * 50
        acked += [b"a%d" % i for i in range(50)]

        etcd.members[0].kill()
        # Longer than the 3 s session: the leader keeps acknowledging with its full ISR.
        out = _send(p, [b"b%d" % i for i in range(60)], gap=0.1)
        assert out == [None] * 60, [e for e in out if e][:3]
        acked += [b"b%d" % i for i in range(60)]
        assert _metadata(c[1].bootstrap, "eo")[2][0][4] == (1, 2, 3)

        # A follower dies: the leader would shrink the ISR after replica.lag.time.max.ms,
        # but etcd cannot take the change, so the ISR stays and acks=all cannot complete.
        c[3].kill()
        time.sleep(4)  # the point: past replica.lag.time.max.ms (3 s), when it would shrink
        out = _send(p, [b"c%d" % i for i in range(5)])
        assert all(e is not None for e in out), out
        assert _metadata(c[1].bootstrap, "eo")[2][0][4] == (1, 2, 3)
        log1 = c[1].log()
        assert "ISR changes are refused until etcd answers" in log1
        assert log1.count("ISR changes are refused") == 1  # once, not per attempt
        assert log1.count("etcd unreachable") <= 2

        etcd.restart_member(etcd.members[0].name)
        # Broker 3's session ends, it leaves the ISR, and acks=all completes again.
        _wait(lambda: _metadata(c[1].bootstrap, "eo")[2][0][4] in ((1, 2), (2, 1)), 30,
              "broker 3 out of the ISR")
        out = _send(p, [b"d%d" % i for i in range(20)])
        assert out == [None] * 20, [e for e in out if e][:3]
        acked += [b"d%d" % i for i in range(20)]

        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "eo-read",
                         "isolation.level": "read_uncommitted"})
        cons.assign([TopicPartition("eo", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not set(acked) <= set(got):
            m = cons.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        cons.close()
        assert set(acked) <= set(got)
        assert len(got) == len(set(got))  # no duplicates
    finally:
        c.stop()
