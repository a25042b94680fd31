"""The share-group metrics (yak/share/metrics.py, KIP-1103's names under `yak_share_`)
scraped from a real `yak serve --http`'s /metrics after confluent-kafka's ShareConsumer
consumed with explicit acknowledgements: accepts, rejects and releases counted by type,
acquisitions, the window (in flight, start offset, delivery counts), lock timeouts, the
group by state, the load time and the dead-letter topic."""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def _group_configs(admin: AdminClient, group: str, **configs: str) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(10)


def test_share_metrics_after_consuming(broker_factory: Any) -> None:
    port = _free_port()
    b = broker_factory(http=f"127.0.0.1:{port}",
                       group_share_min_record_lock_duration_ms=1000)
    bs = b.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for t in ("mq", "mq-dlq"):
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(15)
    _group_configs(admin, "mg", **{"share.auto.offset.reset": "earliest",
                                   "share.record.lock.duration.ms": "4000",
                                   "errors.deadletterqueue.topic.name": "mq-dlq"})
    p = Producer({"bootstrap.servers": bs})
    for i in range(10):
        p.produce("mq", b"v%d" % i, partition=0)
    assert p.flush(15) == 0
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "mg",
                       "share.acknowledgement.mode": "explicit"})
    tp = {"group": "mg", "topic": "mq", "partition": "0"}
    try:
        c.subscribe(["mq"])
        got: dict[int, Any] = {}
        end = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < end:
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                got[m.offset()] = m
        assert sorted(got) == list(range(10))
        for off, m in sorted(got.items()):
            if off <= 5:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            elif off == 6:
                c.acknowledge(m, AcknowledgeType.REJECT)
            elif off == 7:
                c.acknowledge(m, AcknowledgeType.RELEASE)
            # 8 and 9 stay held: their locks run out
        c.commit_sync()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            text = http.get("/metrics").text
            acks = {k: sample(text, "yak_share_record_acknowledgements_total", **tp,
                              ack_type=k) for k in ("accept", "release", "reject", "renew")}
            assert acks == {"accept": 6, "release": 1, "reject": 1, "renew": 0}, acks
            assert sample(text, "yak_share_records_acquired_total", **tp) == 10
            assert sample(text, "yak_share_records_archived_total", **tp,
                          reason="rejected") == 1
            # the window: 7 (released, available again), 8 and 9 (held)
            assert sample(text, "yak_share_partition_in_flight_messages", **tp) == 3
            assert sample(text, "yak_share_partition_start_offset", **tp) == 7
            assert sample(text, "yak_share_group_in_flight_by_delivery_count", group="mg",
                          delivery_count="1") == 3
            assert sample(text, "yak_share_groups", state="Stable") == 1
            assert sample(text, "yak_share_partition_load_time_ms_count") >= 1
            assert sample(text, "yak_share_group_dead_letter_topic_info", group="mg",
                          topic="mq-dlq") == 1

            def timeouts() -> float | None:
                return sample(http.get("/metrics").text,
                              "yak_share_acquisition_lock_timeouts_total", **tp)

            end = time.monotonic() + 20
            while (timeouts() or 0) < 2 and time.monotonic() < end:
                time.sleep(0.5)
            assert timeouts() == 2
            text = http.get("/metrics").text
            assert sample(text, "yak_share_partition_acquired_messages", **tp) == 0
    finally:
        c.close()
