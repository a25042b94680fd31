"""A share group keeps receiving after its share-partition leader is SIGKILLed (issue 24).

The share chaos workload (`yak chaos run -n 3 --duration 180 --faults kill,pause
--workloads share --seed 24`) saw two share partitions deliver nothing for the last 35 s
of the run after their leader was killed: the new leader never acquired their records
(intact in the log, delivered at count 1 after a restart). Here, with consumers polling
all along and a producer writing to every partition, the leader of q-0 is killed and
restarted as the chaos run did (or the share coordinator of q-0's state); every record produced must reach the consumers within
the lock duration + 10 s of the last write, each partition's included, and the brokers
must log no failed share-partition load that never recovered."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic, ResourceType

from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from tests.cluster.test_cluster_metadata import _metadata
from tests.share.test_share_cluster import _set, _topic_id
from yak.share.records import SHARE_STATE_TOPIC, ShareKey, partition_for

T = 20
LOCK_MS = 5000
PARTS = 3

# A consumer (implicit acknowledgement: each poll accepts the previous one's records)
# printing "partition:offset" per record received, until killed.
RECEIVER = textwrap.dedent("""
    import sys
    from confluent_kafka import ShareConsumer
    bootstrap, group, topic = sys.argv[1:4]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([topic])
    print("joined", flush=True)
    while True:
        for m in c.poll(0.2):
            if m.error() is None:
                print(f"{m.partition()}:{m.offset()}", flush=True)
""")


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["leader", "coordinator"])
def test_share_partitions_keep_delivering_after_their_leader_is_killed(
        cluster_factory, kill: str) -> None:  # noqa: F811 (the fixture imported above)
    c = cluster_factory(3, **{"group.share.record.lock.duration.ms": str(LOCK_MS),
                              "group.share.min.record.lock.duration.ms": "1000"})
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("q", PARTS, 3, config={"min.insync.replicas": "2"})]
                    )["q"].result(T)
    # earliest: a share partition first loaded after the first writes still hands them out
    _set(a, ResourceType.GROUP, "g", **{"share.auto.offset.reset": "earliest"})
    got: set[str] = set()
    lock = threading.Lock()
    receivers = [subprocess.Popen([sys.executable, "-c", RECEIVER, c.bootstrap, "g", "q"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True) for _ in range(2)]

    def read(proc: subprocess.Popen[str]) -> None:
        for line in proc.stdout or ():
            with lock:
                got.add(line.strip())

    try:
        for r in receivers:
            assert r.stdout is not None and r.stdout.readline() == "joined\n"
            threading.Thread(target=read, args=(r,), daemon=True).start()
        time.sleep(6)  # joined and fetching: the share partitions start at the log end
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                      "message.timeout.ms": "60000"})
        sent: dict[str, None] = {}

        def delivered(err: object, msg: object) -> None:
            if err is None:
                sent[f"{msg.partition()}:{msg.offset()}"] = None  # type: ignore[attr-defined]

        def produce(seconds: float) -> None:
            end = time.monotonic() + seconds
            i = 0
            while time.monotonic() < end:
                p.produce("q", b"v%d" % i, partition=i % PARTS, on_delivery=delivered)
                p.poll(0)
                i += 1
                time.sleep(0.02)

        produce(4)
        _, _, q_parts = _metadata(c[1].bootstrap, "q")
        victim = next(leader for part, leader, *_ in q_parts if part == 0)
        if kill == "coordinator":  # the share coordinator of q-0's state
            state = _metadata(c[1].bootstrap, SHARE_STATE_TOPIC)[2]
            key = ShareKey("g", _topic_id(c[1].bootstrap, "q"), 0)
            victim = state[partition_for(key, len(state))][1]
        c[victim].kill()
        produce(4)  # the chaos run's kill was held ~4 s
        c[victim].restart()
        produce(10)
        assert p.flush(60) == 0
        assert len(sent) > 100
        bound = time.monotonic() + LOCK_MS / 1000 + 10
        while time.monotonic() < bound:
            with lock:
                if set(sent) <= got:
                    break
            time.sleep(0.2)
        with lock:
            missing = set(sent) - got
        by_part = {part: sum(1 for k in missing if k.startswith(f"{part}:"))
                   for part in range(PARTS)}
        logs = "\n".join(line for b in c.brokers.values() for line in b.log().splitlines()
                         if "not loaded" in line)
        assert not missing, (f"not delivered within {LOCK_MS / 1000 + 10:.0f} s of the "
                             f"last write, per partition: {by_part}; victim {victim}: "
                             f"{sorted(missing, key=lambda k: tuple(map(int, k.split(':'))))}\n"
                             f"{logs}")
    finally:
        for r in receivers:
            r.kill()
            r.wait(10)
