"""Issue 27 on a real 3-broker cluster (etcd, `yak serve` processes, librdkafka), at Yak's
default settings (9 s sessions): a killed leader is replaced within 3 s, because the
controller's liveness probe (yak/cluster/liveness.py) fences a broker whose listener
refuses connections after its connection closed, without waiting for its session.

The victim is the leader of the first partition not led by the controller: a killed
controller is still found by its session's expiry (the probe is the controller's), which
these tests do not claim to shorten.

A paused broker (SIGSTOP) still accepts connections in its kernel: the probe must leave it
alone through a pause shorter than `broker.liveness.unresponsive.ms` (2 s), and it keeps
its registration (a longer freeze: tests/cluster/test_liveness_pause.py).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tests.waiting import wait_until
from yak.chaos.env import ChaosCluster, ClusterSpec

TOPIC = "fastleader"
PARTITIONS = 3
DEFAULTS = {
    # ChaosCluster's own test-speed settings, back to Yak's defaults
    "broker.session.timeout.ms": "9000",
    "broker.heartbeat.interval.ms": "2000",
    "replica.lag.time.max.ms": "30000",
    "auto.create.topics.enable": "false",
}


def _wait(cond: Any, timeout: float, what: str) -> None:
    """Until `cond()`; a broker that refuses or fails the call meanwhile is not yet."""
    wait_until(cond, timeout, what, every=0.1, ignore=(Exception,))


class Writer(threading.Thread):
    """An idempotent acks=all producer with librdkafka's default settings, writing one
    partition every 10 ms; records (send time, ack time, value) of every acknowledged
    write."""

    client: dict[str, Any] = {}  # producer settings over librdkafka's defaults

    def __init__(self, bootstrap: str, partition: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.partition = partition
        self.stop = threading.Event()
        self.acks: list[tuple[float, float, bytes]] = []
        self.failed: list[str] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                      "acks": "all", "log_level": 0, **self.client})
        n = 0
        while not self.stop.is_set():
            value = f"v{n}".encode()
            sent = time.monotonic()

            def cb(err: Any, msg: Any, sent: float = sent, value: bytes = value) -> None:
                with self.lock:
                    if err is None:
                        self.acks.append((sent, time.monotonic(), value))
                    else:
                        self.failed.append(str(err))

            p.produce(TOPIC, value=value, partition=self.partition, on_delivery=cb)
            n += 1
            p.poll(0.01)
        p.flush(60)

    def acked(self) -> int:
        with self.lock:
            return len(self.acks)

    def first_ack_sent_after(self, t: float) -> float | None:
        with self.lock:
            times = [acked for sent, acked, _v in self.acks if sent >= t]
        return min(times) if times else None


def _metadata(cluster: ChaosCluster) -> tuple[int, dict[int, tuple[int, list[int]]]]:
    md = cluster.admin().list_topics(TOPIC, timeout=5)
    t = md.topics[TOPIC]
    return md.controller_id, {p: (pm.leader, sorted(pm.isrs)) for p, pm in t.partitions.items()}


def _start(tmp_path: Path) -> ChaosCluster:
    from confluent_kafka.admin import NewTopic

    cluster = ChaosCluster(ClusterSpec(tmp_path / "cluster", brokers=3,
                                       session_timeout_ms=9000, broker_settings=DEFAULTS))
    cluster.start()
    try:  # a failed start must not leave the brokers running
        admin = cluster.admin()  # kept referenced until its futures are done
        fs = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                           config={"min.insync.replicas": "2"})])
        for f in fs.values():
            f.result(30)
        _wait(lambda: all(leader > 0 and len(isr) == 3
                          for leader, isr in _metadata(cluster)[1].values())
              and len(_metadata(cluster)[1]) == PARTITIONS, 30, "leaders and full ISRs")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _victim(cluster: ChaosCluster) -> tuple[int, int, int]:
    """(partition, its leader, the controller): the first partition a non-controller leads."""
    controller, parts = _metadata(cluster)
    for p in sorted(parts):
        if parts[p][0] != controller:
            return p, parts[p][0], controller
    raise AssertionError(f"every partition is led by the controller: {parts}")


def _read_back(bootstrap: str, partition: int) -> set[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "readback",
                  "enable.auto.commit": False, "log_level": 0})
    try:
        _lo, hw = c.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=10)
        c.assign([TopicPartition(TOPIC, partition, 0)])
        got: set[bytes] = set()
        seen = 0
        deadline = time.monotonic() + 30
        while seen < hw and time.monotonic() < deadline:
            for m in c.consume(500, 1.0):
                if m.error() is None:
                    got.add(m.value())
                    seen = max(seen, m.offset() + 1)
        return got
    finally:
        c.close()


def _log(cluster: ChaosCluster, node: int) -> str:
    return cluster.brokers[node].log_path.read_text(errors="replace")


def test_a_killed_leader_is_replaced_within_3_s(tmp_path: Path) -> None:
    cluster = _start(tmp_path)
    writer: Writer | None = None
    try:
        partition, victim, controller = _victim(cluster)
        writer = Writer(cluster.bootstrap, partition)
        writer.start()
        _wait(lambda: writer.acked() >= 200, 30, "200 acknowledged writes")
        # The probe judges only a broker it has reached once (a broker registers before it
        # listens): kill after the controller's probe holds its connection to the victim.
        _wait(lambda: f"liveness: probing broker {victim} " in _log(cluster, controller), 30,
              "the controller's probe connected to the victim")
        killed = time.monotonic()
        cluster.kill(victim)
        _wait(lambda: writer.first_ack_sent_after(killed) is not None, 30,
              "an ack of a write sent after the kill")
        first = writer.first_ack_sent_after(killed)
        assert first is not None
        took = first - killed
        print(f"\nkill -9 of broker {victim} (leader of partition {partition},"
              f" controller {controller}) -> first ack: {took:.2f} s")
        assert took <= 3.0, f"first ack {took:.2f} s after the kill"
        assert f"liveness: broker {victim}" in _log(cluster, controller)
        target = writer.acked() + 100
        _wait(lambda: writer.acked() >= target, 30, "100 more acks on the new leader")
        writer.stop.set()
        writer.join(90)
        cluster.start_broker(victim)
        _wait(lambda: all(len(isr) == 3 for _l, isr in _metadata(cluster)[1].values()),
              60, "the restarted broker back in every ISR")
        acked = {v for _s, _a, v in writer.acks}
        missing = acked - _read_back(cluster.bootstrap, partition)
        assert not missing, f"{len(missing)} acknowledged writes lost: {sorted(missing)[:5]}"
    finally:
        if writer is not None:
            writer.stop.set()
            writer.join(30)
        cluster.stop()


def test_a_paused_broker_is_not_fenced_by_the_probe(tmp_path: Path) -> None:
    cluster = _start(tmp_path)
    victim = -1
    try:
        partition, victim, controller = _victim(cluster)
        registered = f"broker {victim} registered, epoch"
        assert _log(cluster, victim).count(registered) == 1
        cluster.pause(victim)
        time.sleep(1.0)  # the point: paused for half the 2 s unresponsive bound
        cluster.resume(victim)
        _wait(lambda: all(len(isr) == 3 for _l, isr in _metadata(cluster)[1].values()),
              60, "every ISR full after SIGCONT")
        time.sleep(1.0)  # a window for a late liveness verdict: it must not come
        assert "liveness: broker" not in _log(cluster, controller)
        # Its session survived the pause: it never registered again, never was fenced.
        log = _log(cluster, victim)
        assert log.count(registered) == 1, "the paused broker registered again"
        assert "is fenced" not in log
        assert _metadata(cluster)[1][partition][0] > 0
    finally:
        if victim > 0:
            cluster.resume(victim)
        cluster.stop()

