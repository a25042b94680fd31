"""The remote fetch quota (KIP-956's remote.log.manager.fetch.max.bytes.per.second;
yak/tiered/quota.py) on a real broker process with a `file://` store and an unmodified
confluent-kafka consumer: a tiered read from offset 0 under a 1 MB/s quota comes at
1 MB/s (within 30%), in order and whole, and /metrics counts the throttled reads."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tests.conftest import YakBroker, free_port
from tests.tiered.test_broker_tiered import create_topic, local_segments, produce, wait_for
from tests.tiered.test_tiered_metrics import file_store_settings, sample, scrape

QUOTA = 1 << 20  # bytes/s


def read_remote_part(b: YakBroker, topic: str, upto: int) -> tuple[list[int], int, float]:
    """Offsets 0..upto-1 (all below the local log start): the values, bytes, seconds."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "quota",
                  "enable.auto.commit": False, "max.partition.fetch.bytes": 256 << 10,
                  "fetch.max.bytes": 256 << 10, "message.max.bytes": 256 << 10,
                  "queued.max.messages.kbytes": 1024})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[int] = []
    nbytes = 0
    t0 = time.monotonic()
    try:
        while len(got) < upto and time.monotonic() - t0 < 120:
            for m in c.consume(500, 1.0):
                assert m.error() is None, m.error()
                if m.offset() < upto:
                    got.append(int(m.value()[:8]))
                    nbytes += len(m.value())
        return got, nbytes, time.monotonic() - t0
    finally:
        c.close()


def test_a_remote_read_is_paced_by_the_fetch_quota(
        tmp_path: Path, broker_factory: Callable[..., YakBroker]) -> None:
    store = tmp_path / "store"
    store.mkdir()
    http = f"127.0.0.1:{free_port()}"
    b = broker_factory(http=http, **file_store_settings(store, **{
        "remote.log.manager.fetch.max.bytes.per.second": str(QUOTA),
        "remote.fetch.max.wait.ms": "500"}))
    create_topic(b, "paced", **{"segment.bytes": str(256 << 10),
                                "remote.storage.enable": "true",
                                "local.retention.bytes": str(256 << 10)})
    n = 7000  # ~7 MB
    produce(b, "paced", 0, n)
    wait_for(lambda: min(int(p.stem) for p in local_segments(b, "paced")) > 5000, 60,
             "local segments deleted after upload")
    upto = 5000  # ~5 MB, all of it remote
    got, nbytes, seconds = read_remote_part(b, "paced", upto)
    assert got == list(range(upto))
    # Before any pacing comes a burst: the bucket saved up one second of quota while the
    # broker sat idle (uploads, local deletion), and the first read goes at once on top of
    # it (yak/tiered/quota.py; the unit test below). The paced rate is over the rest. Not
    # counting it, 5 MB read in 3.66 s once measured 1.37x the quota under load.
    burst = QUOTA + (256 << 10)  # + one read of max.partition.fetch.bytes
    rate = (nbytes - burst) / seconds
    assert 0.7 * QUOTA <= rate <= 1.3 * QUOTA, (rate, nbytes, seconds)
    text = scrape(http)
    throttled = sample(text, "yak_tiered_fetch_throttled_total")
    assert throttled is not None and throttled > 0
    waited = sample(text, "kafka_log_remote_remotelogmanager_remotefetchthrottletime_seconds_total")
    assert waited is not None and waited > 1
    assert "Traceback" not in b.log()


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_bucket_goes_one_read_negative_and_refills_to_one_second() -> None:
    from yak.tiered.quota import RemoteFetchQuota

    clock = _Clock()
    q = RemoteFetchQuota(100, clock)
    assert q.wait_s() == 0  # the first read goes at once
    q.record(150)
    assert q.wait_s() == 1.5
    clock.t += 1.0
    assert q.wait_s() == 0.5
    clock.t += 0.5
    assert q.wait_s() == 0
    clock.t += 60  # idle: at most one second of bytes saved up
    q.record(150)
    assert q.wait_s() == 0.5
    assert q.recorded == 300
    unlimited = RemoteFetchQuota(2**63 - 1, clock)
    unlimited.record(10**12)
    assert unlimited.wait_s() == 0


def test_admit_waits_at_most_its_limit() -> None:
    import asyncio

    from yak.tiered.quota import RemoteFetchQuota

    q = RemoteFetchQuota(1000)
    q.record(2000)  # two seconds of debt
    t0 = time.monotonic()
    assert asyncio.run(q.admit(0.05)) is False  # still spent after the wait: answer empty
    assert 0.04 <= time.monotonic() - t0 < 1.0
    assert q.throttled == 1 and abs(q.throttle_s - 0.05) < 1e-9
    q2 = RemoteFetchQuota(1000)
    q2.record(20)  # 20 ms of debt: waited out
    assert asyncio.run(q2.admit(0.5)) is True
    assert q2.throttled == 1 and q2.throttle_s <= 0.02
