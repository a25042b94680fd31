"""Reassignment metrics (issue 23) in the brokers' /metrics during a throttled move, under
Kafka's names: the moving partitions on their leader
(`kafka_server_replicamanager_reassigningpartitions`), the bytes the adding replica copied
and its leader sent (`kafka_server_brokertopicmetrics_reassignmentbytes{in,out}_total`), the
follower throttle's observed byte rate and the rate in force; all back to rest after."""

from __future__ import annotations

import os
import time

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.cluster.test_reassignment import _alter_raw, _list_raw
from tests.waiting import wait_until

T = 20
RATE = 200_000  # bytes/s: 2 MB take about 10 s
PART_BYTES = 1_000_000


def _scrape(http: str) -> dict[str, float]:
    """Every sample of a broker's /metrics, by name with its labels as written."""
    text = httpx.get(f"http://{http}/metrics", timeout=20).text  # a loaded machine
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


MOVING = "kafka_server_replicamanager_reassigningpartitions"
BYTES_IN = "kafka_server_brokertopicmetrics_reassignmentbytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_reassignmentbytesout_total"
FOLLOWER_RATE = "kafka_server_followerreplication_byte_rate"
IN_FORCE = 'yak_replication_throttled_rate{side="follower"}'


@pytest.mark.slow
def test_metrics_during_a_throttled_move(cluster_factory) -> None:
    c = cluster_factory(2, http=True)
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    admin.create_topics([NewTopic(
        "mm", 2, replica_assignment=[[1], [1]],
        config={"follower.replication.throttled.replicas": "0:2,1:2"})])["mm"].result(T)
    # Small batches (about one value each): the throttle lets whole batches through, so
    # the copy advances in steps of a batch.
    p = Producer({"bootstrap.servers": c[1].bootstrap, "acks": "all", "batch.size": 20_000})
    value = os.urandom(10_000)
    for part in (0, 1):
        for _ in range(PART_BYTES // len(value)):
            p.produce("mm", value, partition=part)
            p.poll(0)
    assert p.flush(60) == 0
    res = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[ConfigEntry(
        "follower.replication.throttled.rate", str(RATE),
        incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(T)
    at_rest = {n: _scrape(c[n].http) for n in (1, 2)}
    assert at_rest[1][MOVING] == 0 and at_rest[2][BYTES_IN] == 0
    assert at_rest[2][IN_FORCE] == RATE  # the throttle in force, before anything moves

    started = time.monotonic()
    assert _alter_raw(c[1].bootstrap, {("mm", 0): [1, 2], ("mm", 1): [1, 2]}) == {
        ("mm", 0): 0, ("mm", 1): 0}
    # Broker 1 leads both moving partitions (Kafka counts them on the leader).
    wait_until(lambda: _scrape(c[1].http)[MOVING] == 2, T, "2 moving partitions on leader 1")
    first = _scrape(c[2].http)
    time.sleep(2.5)
    second = _scrape(c[2].http)
    leader = _scrape(c[1].http)
    moving = len(_list_raw(c[1].bootstrap))
    # Every fact checked before any assertion, so a failure shows them all.
    seen = {"moving listed": moving, "moving on 1": leader[MOVING],
            "moving on 2": second[MOVING], "in before": first[BYTES_IN],
            "in after 2.5 s": second[BYTES_IN], "out on 1": leader[BYTES_OUT],
            "follower byte rate early": second[FOLLOWER_RATE]}
    print(seen)
    assert moving == 2, seen
    assert leader[MOVING] == 2 and second[MOVING] == 0, seen
    assert second[BYTES_IN] > first[BYTES_IN] > 0, seen
    assert leader[BYTES_OUT] > 0, seen
    # The byte rate spans the last 5-10 s (from the move's start, a 5 s floor, as Kafka's
    # Rate): read once more than 5 s of copying (1.2 MB at 200 KB/s) is behind it.
    wait_until(lambda: _scrape(c[2].http)[BYTES_IN] >= 1_200_000, 60, "1.2 MB copied")
    rate = _scrape(c[2].http)[FOLLOWER_RATE]
    assert 0.5 * RATE < rate < 1.5 * RATE, rate

    wait_until(lambda: _list_raw(c[1].bootstrap) == {}, 120, "the move finished")
    took = time.monotonic() - started
    wait_until(lambda: _scrape(c[1].http)[MOVING] == 0, T, "no moving partition on 1")
    after = {n: _scrape(c[n].http) for n in (1, 2)}
    print(f"moved in {took:.1f} s; bytes in {after[2][BYTES_IN]:.0f}, out "
          f"{after[1][BYTES_OUT]:.0f}, throttled {after[2].get(IN_FORCE)}")
    assert after[2][MOVING] == 0
    # The adding replica copied both partitions' logs (the batches' bytes: a little more
    # than the values), and its leader counted what it sent it.
    total = 2 * PART_BYTES
    assert total <= after[2][BYTES_IN] < 1.1 * total, after[2][BYTES_IN]
    assert 0.9 * total <= after[1][BYTES_OUT] < 1.1 * total, after[1][BYTES_OUT]
    assert after[1][BYTES_IN] == 0 and after[2][BYTES_OUT] == 0
    assert after[2]['yak_replication_throttled_bytes_total{side="follower"}'] >= total
    # Nothing moves now: a later scrape counts nothing more.
    time.sleep(1)
    assert _scrape(c[2].http)[BYTES_IN] == after[2][BYTES_IN]


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_observed_rate_of_a_quota_over_two_windows() -> None:
    """RateQuota's byte rate (the LeaderReplication/FollowerReplication byte-rate metric):
    bytes over the previous and current 5 s windows, 0 once nothing was recorded for two."""
    from yak.cluster.replication_throttle import RATE_WINDOW_S, RateQuota

    clock = _Clock()
    q = RateQuota(lambda: 1_000_000, clock)
    assert q.observed_rate() == 0 and q.recorded == 0
    for _ in range(20):  # 100 KB/s for 20 s, a record every second
        clock.t += 1
        q.record(100_000)
    assert q.recorded == 2_000_000
    assert 80_000 <= q.observed_rate() <= 120_000, q.observed_rate()
    clock.t += 2 * RATE_WINDOW_S
    assert q.observed_rate() == 0
    # After an idle hour, the first bytes are a rate over one window, not over the hour.
    clock.t += 3600
    q.record(500_000)
    assert q.observed_rate() == 500_000 / RATE_WINDOW_S


def test_traffic_counts_only_adding_replicas_of_moving_partitions() -> None:
    """ReassignmentTraffic over an image: moving partitions rebuilt on a new revision, bytes
    counted only for a replica the record is adding, the gauge on the leader."""
    from yak.broker.reassignment_metrics import ReassignmentTraffic
    from yak.cluster.etcd_store import PartitionEntry
    from yak.cluster.records import PartitionRecord

    class Image:
        revision = 1
        parts = {("t1", 0): PartitionRecord("t1", 0, (2, 1), (1,), leader=1,
                                            adding_replicas=(2,), removing_replicas=(1,)),
                 ("t1", 1): PartitionRecord("t1", 1, (1,), (1,), leader=1)}

        def all_partitions(self):  # noqa: ANN202
            return [(t, p, PartitionEntry(rec, 1)) for (t, p), rec in self.parts.items()]

        def topic_name(self, topic_id: str) -> str | None:
            return {"t1": "mv"}.get(topic_id)

    image = Image()
    on_2 = ReassignmentTraffic(2, image)
    on_1 = ReassignmentTraffic(1, image)
    on_2.copied("mv", 0, 1000)
    on_2.copied("mv", 1, 1000)  # not moving
    assert on_2.bytes_in == 1000 and on_2.leading() == 0 and on_1.leading() == 1
    assert on_1.moving() == {("mv", 0): (1, frozenset({2}))}
    on_1.sent(2, "mv", 0, 700)
    on_1.sent(3, "mv", 0, 700)  # not an adding replica
    on_1.copied("mv", 0, 500)  # broker 1 is not adding
    assert on_1.bytes_out == 700 and on_1.bytes_in == 0
    # The move completes: a new revision, nothing moves, nothing more is counted.
    image.parts = {("t1", 0): PartitionRecord("t1", 0, (2,), (2,), leader=2)}
    image.revision = 2
    on_2.copied("mv", 0, 1000)
    assert on_2.bytes_in == 1000 and on_2.moving() == {} and on_1.leading() == 0
