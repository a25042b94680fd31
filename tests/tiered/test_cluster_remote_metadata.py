"""The remote log metadata in etcd (issue 25; docs/tiered.md, "Where the metadata lives"):
three real `yak serve` processes on a real etcd, a SeaweedFS S3 store of this test's own
(it is stopped and started again), unmodified clients.

- after uploads, etcd holds the partition's head and one key per remote segment, the same
  version and segments as the bucket's newest manifest;
- a crash between the two writes: the store goes down, the leader commits its next
  uploads STARTED in etcd and cannot publish them to the bucket; it is killed (SIGKILL)
  and the store comes back. The new leader republishes the committed version (the bucket
  never named an object it lacked), sweeps the dead leader's STARTED entries and carries on
  from etcd: no segment uploaded twice, no hole, every record read back from offset 0;
- DeleteTopics drops the topic's keys from etcd.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import obstore
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from obstore.store import S3Store

from tests.cluster.conftest import YakCluster, cluster_factory, etcd, keys, run  # noqa: F401
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_broker_tiered import (
    BUCKET,
    consume_confluent,
    produce,
    tiered_settings,
    wait_for,
)
from yak.cluster.etcd import EtcdClient
from yak.devcluster.local import LocalEtcd
from yak.tiered import Manifest
from yak.tiered.metadata import RemoteLogSegmentMetadata, SegmentState

TOPIC = "rmd"
PREFIX = "remotemeta"


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[SeaweedS3]:
    """A store of this test's own: stopping it must not disturb other tests' stores."""
    w = SeaweedS3(str(tmp_path / "s3"))
    (tmp_path / "s3").mkdir()
    w.start()
    w.create_bucket(BUCKET)
    yield w
    w.stop()


def _objects(weed: SeaweedS3) -> list[str]:
    store = S3Store(BUCKET, endpoint=weed.endpoint, region="us-east-1", access_key_id="yak",
                    secret_access_key="yaksecret", virtual_hosted_style_request=False,
                    client_options={"allow_http": True})
    return [m["path"] for chunk in obstore.list(store, f"{PREFIX}/") for m in chunk]


def _bucket(weed: SeaweedS3) -> Manifest | None:
    """The bucket's newest manifest, read without a broker (as Spark does)."""
    store = S3Store(BUCKET, endpoint=weed.endpoint, region="us-east-1", access_key_id="yak",
                    secret_access_key="yaksecret", virtual_hosted_style_request=False,
                    client_options={"allow_http": True})
    manifests = [k for k in _objects(weed) if "/manifest/" in k]
    if not manifests:
        return None
    return Manifest.from_bytes(bytes(obstore.get(store, max(manifests)).bytes()))


def _etcd(e: LocalEtcd, c: YakCluster) -> dict[str, dict]:  # type: ignore[type-arg]
    """Every remote log metadata key of the cluster's namespace (relative), decoded."""
    async def read() -> dict[str, dict]:  # type: ignore[type-arg]
        async with EtcdClient(e.endpoints) as client:
            r = await client.range(c.keys.remote_log, prefix=True)
            return {kv.key[len(c.keys.remote_log):]: json.loads(kv.value) for kv in r.kvs}
    return run(read())


def _stored(e: LocalEtcd, c: YakCluster) -> tuple[dict, list[RemoteLogSegmentMetadata]]:  # type: ignore[type-arg]
    """(head, segments) of partition 0 in etcd; ({}, []) if nothing is there."""
    head: dict = {}  # type: ignore[type-arg]
    segs = []
    for k, v in _etcd(e, c).items():
        _tid, part, rest = k.split("/", 2)
        if part != "0":
            continue
        if rest == "head":
            head = v
        else:
            assert rest.startswith("segments/"), k
            s = RemoteLogSegmentMetadata.from_json(v)
            assert rest == f"segments/{s.base_offset:020d}-{s.segment_id}", k
            segs.append(s)
    return head, sorted(segs, key=lambda s: s.base_offset)


def _leader(c: YakCluster) -> int:
    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(TOPIC, timeout=10)
    return int(md.topics[TOPIC].partitions[0].leader)


def _in_step(e: LocalEtcd, c: YakCluster, weed: SeaweedS3) -> bool:
    """etcd's committed version is the bucket's newest, segment for segment."""
    head, segs = _stored(e, c)
    m = _bucket(weed)
    return bool(head) and m is not None and m.version == head["version"] and sorted(
        (s.to_json() for s in segs), key=lambda d: d["segment_id"]) == sorted(
        (s.to_json() for s in m.segments), key=lambda d: d["segment_id"])


def _bucket_names_only_what_is_there(weed: SeaweedS3) -> None:
    m = _bucket(weed)
    assert m is not None
    listed = set(_objects(weed))
    part = f"{PREFIX}/{TOPIC}-{m.topic_id}/0"
    for s in m.copied:
        missing = {s.object_key(part, k) for k in s.files} - listed
        assert not missing, (m.version, missing)


def test_metadata_in_etcd_a_crash_between_the_two_writes_and_a_leader_change(
        weed: SeaweedS3, etcd: LocalEtcd,  # noqa: F811
        cluster_factory: Callable[..., YakCluster]) -> None:  # noqa: F811
    c = cluster_factory(3, **tiered_settings(weed, PREFIX),
                        **{"auto.leader.rebalance.enable": "false"})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={
        "segment.bytes": str(256 << 10), "remote.storage.enable": "true",
        "local.retention.bytes": str(512 << 10), "min.insync.replicas": "2"})])[TOPIC].result(30)
    produce(c, TOPIC, 0, 3000)  # type: ignore[arg-type]  # ~3 MB, acks=all

    # etcd holds the metadata: a head and one key per segment, as the bucket's manifest.
    wait_for(lambda: len([s for s in _stored(etcd, c)[1]
                          if s.state is SegmentState.COPY_SEGMENT_FINISHED]) >= 5, 60,
             "finished uploads committed in etcd")
    wait_for(lambda: _in_step(etcd, c, weed), 30, "the bucket's manifest as etcd's version")
    head, first = _stored(etcd, c)
    old = _leader(c)
    assert head["broker_id"] == old and head["format"] == 1
    assert all(s.broker_id == old for s in first)

    # The store goes down: the leader's next commit lands in etcd, its publication cannot.
    weed.stop()
    produce(c, TOPIC, 3000, 1500)  # type: ignore[arg-type]  # local: unaffected

    def committed_not_published() -> bool:
        h, segs = _stored(etcd, c)
        return h["version"] > head["version"] and any(
            s.state is SegmentState.COPY_SEGMENT_STARTED for s in segs)
    wait_for(committed_not_published, 60, "uploads committed STARTED in etcd")
    c[old].kill()
    _crashed, segs = _stored(etcd, c)
    stale = {s.segment_id for s in segs if s.state is SegmentState.COPY_SEGMENT_STARTED}
    weed.start()  # the same endpoint and data: it never saw that version
    _bucket_names_only_what_is_there(weed)

    wait_for(lambda: _leader(c) not in (-1, old), 30, "a new leader")
    new = _leader(c)
    wait_for(lambda: not stale & {s.segment_id for s in _stored(etcd, c)[1]}, 60,
             "the dead leader's STARTED entries swept")
    assert "bucket manifest republished" in c[new].log(), "the lost version not republished"
    _bucket_names_only_what_is_there(weed)

    # The new leader carries on from etcd: the old leader's segments kept, nothing twice.
    produce(c, TOPIC, 4500, 1500)  # type: ignore[arg-type]
    wait_for(lambda: max((s.end_offset for s in _stored(etcd, c)[1]
                          if s.state is SegmentState.COPY_SEGMENT_FINISHED), default=0)
             >= 5000, 90, "the new leader's uploads")
    wait_for(lambda: _in_step(etcd, c, weed), 30, "the bucket in step with etcd again")
    _bucket_names_only_what_is_there(weed)
    head, done = _stored(etcd, c)
    assert head["broker_id"] == new
    kept = {s.segment_id: (s.base_offset, s.end_offset) for s in done}
    assert all(kept.get(s.segment_id) == (s.base_offset, s.end_offset) for s in first)
    assert done[0].base_offset == 0
    for a, b in zip(done, done[1:], strict=False):
        assert b.base_offset <= a.end_offset + 1, ("a hole in the remote log", a, b)
        assert b.base_offset > a.base_offset and b.end_offset > a.end_offset, (a, b)
        assert b.base_offset > a.end_offset or a.broker_id != b.broker_id, (a, b)
    assert consume_confluent(c, TOPIC, 0, 6000) == list(range(6000))  # type: ignore[arg-type]
    for node in (1, 2, 3):
        if node != old:
            assert "Traceback" not in c[node].log(), node

    # DeleteTopics drops the topic's remote log metadata with it. A new admin client: the
    # first one's cached controller may be the killed broker (librdkafka waits for it).
    live = AdminClient({"bootstrap.servers": ",".join(
        c[n].bootstrap for n in (1, 2, 3) if n != old)})
    live.delete_topics([TOPIC])[TOPIC].result(30)
    wait_for(lambda: _etcd(etcd, c) == {}, 30, "the topic's remote log metadata dropped")
