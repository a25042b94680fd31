"""A new leader of a tiered partition serves nothing remote before it has read the remote
log metadata for its leadership (issue 25). Its copy as a follower may predate a
DeleteRecords that its predecessor answered; served from that copy, a Fetch below the
local log start, ListOffsets EARLIEST or the log start a Fetch reports would hand out
records, or offsets, that were acknowledged as deleted. Until the new leader has read the
metadata store's committed start, such requests wait for it or get a retriable error
(KAFKA_STORAGE_ERROR, OFFSET_NOT_AVAILABLE).

Real `yak serve` processes on a real etcd and SeaweedFS. The followers are restarted with
rounds a minute apart, so their copies are the ones read at start-up, before the
DeleteRecords; the leader is SIGKILLed right after the answer and both survivors are
queried without pause from then on. On the old code the new leader answered EARLIEST 0
and served offset 0 from the remote log until its first round, up to a second after the
election.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import YakCluster, cluster_factory, etcd, keys  # noqa: F401
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_broker_tiered import (  # noqa: F401 - `s3` is a fixture
    consume_confluent,
    produce,
    s3,
    tiered_settings,
    wait_for,
)
from tests.tiered.test_delete_records_durable import _check_start, _delete_records
from yak.errors import ErrorCode

TOPIC = "newlead"
SEGMENT = 256 << 10
START = 300
EARLIEST = -2
# What a survivor may answer meanwhile: not the leader (yet), or not ready (retriable).
RETRIABLE = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
             ErrorCode.kafka_storage_error, ErrorCode.offset_not_available,
             ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch}


def _leader(c: YakCluster) -> int:
    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(TOPIC, timeout=10)
    return int(md.topics[TOPIC].partitions[0].leader)


def _isr(c: YakCluster) -> int:
    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(TOPIC, timeout=10)
    return len(md.topics[TOPIC].partitions[0].isrs)


def _retried(call: Callable[[], int], timeout: float = 30) -> int:
    """`call` until it answers (the restarted brokers learn the leader meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _probe(client: RawClient, node: int, seen: list[tuple[Any, ...]]) -> bool:
    """One ListOffsets EARLIEST and Fetches below the start; every answer is appended to
    `seen` as (node, what, error, offset or log start, bytes). True if this broker gave
    the settled answers: EARLIEST = START and OFFSET_OUT_OF_RANGE below it."""
    lo = client.list_offset(TOPIC, 0, EARLIEST)
    seen.append((node, "earliest", lo.error_code, lo.offset, 0))
    settled = lo.error_code == ErrorCode.none and lo.offset == START
    for below in (0, START - 1):
        # v10: from the leader only (a consumer reading a follower, KIP-392, is served
        # from that follower's copy, re-read each round: not what this test is about).
        p = client.fetch(TOPIC, 0, below, version=10).responses[0].partitions[0]
        seen.append((node, f"fetch@{below}", p.error_code, p.log_start_offset,
                     len(p.records or b"")))
        settled = settled and p.error_code == ErrorCode.offset_out_of_range
    return settled


def _violations(seen: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Answers that name a deleted offset or carry deleted records, or unexpected errors."""
    bad = []
    for node, what, code, offset, size in seen:
        if code == ErrorCode.none:
            if size or 0 <= offset < START:
                bad.append((node, what, code, offset, size))
        elif code == ErrorCode.offset_out_of_range:
            if 0 <= offset < START:
                bad.append((node, what, code, offset, size))
        elif code not in RETRIABLE:
            bad.append((node, what, code, offset, size))
    return bad


@pytest.mark.slow
def test_a_new_leader_serves_nothing_below_an_answered_delete_records_start(
        s3: SeaweedS3, cluster_factory: Callable[..., YakCluster]) -> None:  # noqa: F811
    c = cluster_factory(3, **tiered_settings(s3, "newlead"))
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={
        "segment.bytes": str(SEGMENT), "remote.storage.enable": "true",
        "local.retention.bytes": str(SEGMENT)})])[TOPIC].result(30)
    produce(c, TOPIC, 0, 1000)  # type: ignore[arg-type]  # acks=all

    def local_start(node: int) -> int:
        logs = sorted((c[node].data_dir / f"{TOPIC}-0").glob("*.log"))
        return int(logs[0].stem) if logs else -1
    # Uploaded, and deleted locally on every replica (the followers follow the metadata).
    wait_for(lambda: min(local_start(n) for n in (1, 2, 3)) > START, 90,
             "uploaded segments deleted on every replica")
    # The followers' rounds a minute apart from now on: their copies are the ones read at
    # start-up, before the DeleteRecords.
    leader = _leader(c)
    for n in (1, 2, 3):
        if n != leader:
            c[n].settings["remote.log.manager.task.interval.ms"] = "60000"
            c[n].restart()
    wait_for(lambda: _leader(c) == leader and _isr(c) == 3, 60, "the followers back in sync")
    assert _retried(lambda: _delete_records(c, START, TOPIC)) == START  # type: ignore[arg-type]
    c[leader].kill()

    survivors = [n for n in (1, 2, 3) if n != leader]
    clients = {n: RawClient(c[n].bootstrap) for n in survivors}
    seen: list[tuple[Any, ...]] = []
    settled_at = None
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            settled = [_probe(clients[n], n, seen) for n in survivors]
            if any(settled) and settled_at is None:
                settled_at = time.monotonic()
            if settled_at is not None and time.monotonic() - settled_at > 2:
                break
    finally:
        for cl in clients.values():
            cl.close()
    assert settled_at is not None, seen[-10:]
    assert not _violations(seen), (_violations(seen)[:10], len(seen))
    new = c[_leader(c)]
    _check_start(new, START, TOPIC)
    assert consume_confluent(new, TOPIC, START, 1000 - START) == list(range(START, 1000))
    for node in survivors:
        assert "Traceback" not in c[node].log(), node
