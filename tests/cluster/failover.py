"""The failover scenario harness: a 3-broker cluster on etcd, an idempotent acks=all
producer writing unique values, faults, and the checks every scenario ends with.

Built from the reusable chaos parts (issue 16 runs the same ones for longer and at random):
`yak.chaos.env.ChaosCluster` (etcd + `yak serve` processes with kill -9 / SIGTERM /
SIGSTOP hooks), `yak.chaos.queue` (the Jepsen "queue" producer and consumers, the final
reads), `yak.chaos.checker.check`, and from this issue `yak.chaos.links` (a TCP proxy per
replication link) and `yak.chaos.replicas` (byte-identical replicas, offset gaps).

    with FailoverRun(tmp_path) as run:
        run.wait_acked(100)
        leader = run.leader(0)
        run.cluster.kill(leader)
        run.wait_acked(200)             # progress while it is down
        run.cluster.start_broker(leader)
        verdict = run.finish()          # heal, read everything, check, compare replicas

`finish()` raises AssertionError naming what failed: acknowledged writes lost, values read
twice or never sent, offset gaps, replicas that differ below the high watermark.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.waiting import wait_until
from yak.chaos.checker import CheckResult, check
from yak.chaos.env import ChaosCluster, ClusterSpec
from yak.chaos.history import Recorder, write_history
from yak.chaos.links import ReplicationLinks
from yak.chaos.queue import ConsumerSpec, QueueConsumer, QueueProducer, final_reads
from yak.chaos.replicas import compare_replicas, offset_gaps

TOPIC = "failover"
SESSION_MS = 3000

# Fast failure detection for tests: a session of 3 s (Kafka's default is 9 s), a follower
# out of the ISR after 4 s without catching up (30 s by default).
BROKER_SETTINGS = {
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.backoff.ms": "200",
    "auto.create.topics.enable": "false",
}


class LinkedCluster(ChaosCluster):
    """A ChaosCluster whose brokers replicate through `ReplicationLinks` proxies."""

    def __init__(self, spec: ClusterSpec, links: ReplicationLinks | None) -> None:
        super().__init__(spec)
        self.links = links

    def _broker_process(self, node: int) -> Any:
        proc = super()._broker_process(node)
        if self.links is not None:
            for k, v in self.links.settings(node, self.kafka_port(node)).items():
                proc.argv += ["--set", f"{k}={v}"]
        return proc


class FailoverRun:
    def __init__(self, tmp_path: Path, *, links: bool = False, partitions: int = 3,
                 rate: float = 100.0, settings: dict[str, str] | None = None,
                 seed: int = 11) -> None:
        self.dir = tmp_path
        self.partitions = partitions
        self.links = ReplicationLinks([1, 2, 3]) if links else None
        spec = ClusterSpec(tmp_path / "cluster", brokers=3, session_timeout_ms=SESSION_MS,
                           broker_settings={**BROKER_SETTINGS, **(settings or {})})
        self.cluster = LinkedCluster(spec, self.links)
        self.rec = Recorder()
        self.stop_clients = threading.Event()
        self.producer = QueueProducer("p", self.rec, self.stop_clients,
                                      bootstrap="", topic=TOPIC, partitions=partitions,
                                      rate=rate, seed=seed, drain_s=60.0)
        self.consumers: list[QueueConsumer] = []

    # ------------------------------------------------------------------ life cycle

    def __enter__(self) -> FailoverRun:
        try:
            self.cluster.start()
            self.create_topic(TOPIC, self.partitions)
            self.producer.bootstrap = self.cluster.bootstrap
            self.producer.start()
            self.wait_acked(20, 60)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_clients.set()
        with contextlib.suppress(Exception):
            self.producer.join(30)
        for c in self.consumers:
            with contextlib.suppress(Exception):
                c.join(30)
        with contextlib.suppress(Exception):
            write_history(self.dir / "history.json", self.rec.snapshot())
        self.cluster.stop()
        if self.links is not None:
            self.links.close()

    def create_topic(self, name: str, partitions: int, rf: int = 3,
                     configs: dict[str, str] | None = None) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self.cluster.admin()  # kept referenced until its futures are done
        fs = admin.create_topics([NewTopic(
            name, partitions, rf, config={"min.insync.replicas": "2", **(configs or {})})])
        for f in fs.values():
            f.result(30)
        wait_for(lambda: len(self.leaders(name)) == partitions
                 and all(leader >= 0 for leader in self.leaders(name).values()),
                 30, f"leaders for {name}")

    def add_consumer(self, name: str, spec: ConsumerSpec) -> QueueConsumer:
        c = QueueConsumer(name, self.rec, self.stop_clients, bootstrap=self.cluster.bootstrap,
                          topic=TOPIC, partitions=self.partitions, spec=spec,
                          session_timeout_ms=6000)
        c.start()
        self.consumers.append(c)
        return c

    # ------------------------------------------------------------------ observing

    def metadata(self, topic: str = TOPIC) -> dict[int, tuple[int, list[int], list[int]]]:
        """partition -> (leader, replicas, isr) from a Metadata request."""
        try:
            md = self.cluster.admin().list_topics(topic, timeout=5)
        except Exception:
            return {}
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return {}
        return {p: (pm.leader, list(pm.replicas), list(pm.isrs))
                for p, pm in t.partitions.items()}

    def controller(self) -> int | None:
        """The active controller's node id as Metadata reports it (None if unknown)."""
        try:
            cid = self.cluster.admin().list_topics(timeout=5).controller_id
        except Exception:
            return None
        return cid if cid is not None and cid >= 0 else None

    def leaders(self, topic: str = TOPIC) -> dict[int, int]:
        return {p: v[0] for p, v in self.metadata(topic).items()}

    def leader(self, partition: int = 0) -> int:
        leader = self.leaders().get(partition, -1)
        assert leader > 0, f"partition {partition} has no leader"
        return leader

    def isr(self, partition: int) -> list[int]:
        return sorted(self.metadata().get(partition, (-1, [], []))[2])

    def acked(self) -> int:
        return self.producer.acked

    def wait_acked(self, more: int, timeout: float = 60.0) -> float:
        """Until `more` further sends were acknowledged; returns the seconds it took."""
        target = self.producer.acked + more
        start = time.monotonic()
        wait_for(lambda: self.producer.acked >= target, timeout,
                 f"{more} more acknowledged sends (at {self.producer.acked})")
        return time.monotonic() - start

    def acked_between(self, start: float, end: float) -> int:
        """Acknowledged sends whose acknowledgement came in [start, end] (run time)."""
        return sum(1 for op in self.rec.snapshot()
                   if op.get("op") == "send" and op.get("status") == "ok"
                   and start <= op["time"] <= end)

    def wait_isr_full(self, timeout: float = 60.0, topic: str = TOPIC) -> None:
        def full() -> bool:
            md = self.metadata(topic)
            return bool(md) and all(
                leader > 0 and sorted(isr) == sorted(replicas)
                for leader, replicas, isr in md.values())

        wait_for(full, timeout, f"every replica of {topic} back in the ISR")

    # ------------------------------------------------------------------ the end

    def finish(self, heal: bool = True) -> CheckResult:
        """Stop the workload, bring everything back, read everything, check it all."""
        self.stop_clients.set()
        self.producer.join(90)
        assert not self.producer.is_alive(), "producer did not drain"
        for c in self.consumers:
            c.join(30)
        if heal:
            if self.links is not None:
                self.links.heal()
            for n in self.cluster.node_ids:
                self.cluster.resume(n)
                if not self.cluster.alive(n):
                    self.cluster.start_broker(n)
        self.wait_isr_full(90)
        self.rec.extend(final_reads(self.cluster.bootstrap, {TOPIC: self.partitions},
                                    self.rec.now, timeout_s=120))
        history = self.rec.snapshot()
        write_history(self.dir / "history.json", history)
        result = check(history, final_reads=True)
        (self.dir / "verdict.json").write_text(json.dumps(result.to_dict(), indent=1))
        failures = result.failures()
        assert not failures, [a.to_dict() for a in failures[:5]]
        gaps = offset_gaps(history)
        assert not gaps, {p: g[:10] for p, g in gaps.items()}
        assert self.producer.crash is None, self.producer.crash
        self.assert_replicas_identical()
        return result

    def assert_replicas_identical(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": "hw",
                      "log_level": 0})
        try:
            hws = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                   for p in range(self.partitions)}
        finally:
            c.close()
        dirs = {n: self.cluster.data_dir(n) for n in self.cluster.node_ids}
        for p, hw in hws.items():
            cmp = compare_replicas(dirs, TOPIC, p, hw)
            assert cmp.identical, cmp.describe()
            assert all(size > 0 for _, size, _ in cmp.digests.values()) or hw == 0


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Until `cond()`; a broker that refuses or fails the call meanwhile is not yet."""
    wait_until(cond, timeout, what, every=0.2, ignore=(Exception,))
