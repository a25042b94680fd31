"""Zero-copy fetch (issue 28): Fetch records leave plaintext listeners with sendfile from
the segment files (`yak.storage.file_region.FileRegion`).

- two followers (RF=3) copying their leader through sendfile end byte-identical with it,
  across segment rolls and many concurrent acks=all produces (and with sendfile off);
- a confluent-kafka consumer reads every record back in order from a broker process,
  with sendfile on and off;
- a region whose file was cut under it refuses to hand out bytes it no longer has.

TLS listeners keep the copying path: tests/security/test_zero_copy_tls.py (consumers on a
PLAINTEXT and an SSL listener of one broker read the same records) and
tests/cluster/test_cluster_inter_broker_security.py (replica fetches over SASL_SSL).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cluster.test_replica_fetcher import Cluster, T, log_bytes, produce, run, until
from yak.errors import KafkaStorageError
from yak.partition import PartitionState
from yak.storage import LogConfig
from yak.storage.file_region import FileRegion


def _consume_all(bootstrap: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "zc",
                  "enable.auto.commit": False, "fetch.max.bytes": 65536, "message.max.bytes": 65536,
                  "max.partition.fetch.bytes": 16384})
    try:
        c.assign([TopicPartition("zc", 0, 0)])
        out: list[bytes] = []
        for _ in range(400):
            for m in c.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(m.value())
            if len(out) >= n:
                break
        return out
    finally:
        c.close()


@pytest.mark.parametrize("sendfile", [True, False])
def test_replicas_stay_byte_identical_with_sendfile(tmp_path: Path, sendfile: bool) -> None:
    async def body() -> None:
        c = Cluster(tmp_path)
        c.config = LogConfig.from_props({"min.insync.replicas": "2", "segment.bytes": "8192"})
        await c.start(1, 2, 3)
        try:
            for n in (1, 2, 3):  # read by each new connection
                object.__setattr__(c.running[n].broker.config, "socket_sendfile_enable",
                                   sendfile)
            await c.create_topic(1)
            c.publish(PartitionState((1, 2, 3), (1, 2, 3), 1, 1, 1))  # RF=3
            results = await asyncio.gather(*(produce(c.running[1].port, -1, n=20,
                                                     tag=b"%03d-" % i + b"x" * 100)
                                             for i in range(60)))
            assert {int(r) for r in results} == {0}
            leader = c.rm(1).get_partition(T, 0)
            followers = [c.rm(n).get_partition(T, 0) for n in (2, 3)]
            assert leader.log_end_offset == 1200
            await until(lambda: all(f.log_end_offset == 1200 for f in followers),
                        what="followers caught up")
            assert len(list((tmp_path / "b1").rglob("*.log"))) > 1  # rolled: several segments
            assert log_bytes(c, 1, 1200) == log_bytes(c, 2, 1200) == log_bytes(c, 3, 1200)
        finally:
            await c.stop()

    run(body(), timeout=120)


def test_a_region_cut_under_it_refuses_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(b"a" * 100)
    fd = os.open(path, os.O_RDONLY)
    region = FileRegion(fd, 10, 80, 1)
    assert len(region) == 80 and bytes(region) == b"a" * 80
    os.truncate(path, 50)
    with pytest.raises(KafkaStorageError):
        bytes(region)
    region.release()
    region.release()
    with pytest.raises(KafkaStorageError):
        bytes(region)


@pytest.mark.parametrize("sendfile", ["true", "false"])
def test_a_consumer_reads_everything_back(broker_factory: Any, sendfile: str) -> None:
    """confluent-kafka through a real broker process; small fetches, so one response
    holds regions of several segments (segment.bytes 8 KiB) and many are pipelined."""
    b = broker_factory(**{"socket.sendfile.enable": sendfile, "log.segment.bytes": 8192,
                          "num.partitions": 1})
    # Batches of at most 4 KiB: a batch over segment.bytes would be refused.
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 4096})
    values = [b"%05d-" % i + os.urandom(200) for i in range(3000)]
    errors: list[Any] = []
    for v in values:
        p.produce("zc", v, on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(30) == 0 and errors == []
    assert _consume_all(b.bootstrap, len(values)) == values
