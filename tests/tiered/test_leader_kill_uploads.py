"""Tiered storage in a 3-broker cluster whose leader is killed (SIGKILL) during uploads
(issue 25's test "the same in a 3-broker cluster with a leader kill during uploads").

Real `yak serve` processes on a real etcd, a real S3 store (SeaweedFS on 127.0.0.1),
unmodified clients. ~50 MB go to one partition with 1 MB segments and 4 MB of local
retention, and a copy quota of 2 MB/s so that a copy round (its segments committed
COPY_SEGMENT_STARTED, uploaded one after another, then committed FINISHED) lasts seconds.
While an idempotent producer is still sending, the test watches the bucket and kills the
leader (SIGKILL) when the newest manifest names STARTED uploads of which some objects have
landed and some not: a crash between upload and commit, every time. Then:

- the new leader sweeps the dead leader's STARTED entries (their objects deleted, the
  entries dropped; it logs "swept");
- every acknowledged record reads back from offset 0, in order, with confluent-kafka and
  kafka-python (so from the store, through the new leader: the first ~45 MB are deleted
  locally on every replica);
- the newest manifest's finished segments leave no hole and no range is uploaded twice:
  each starts and ends past the one before; they overlap only where the uploader changed
  (docs/tiered.md: a new leader's segment straddling the copied offset is uploaded whole);
- once the orphan grace has passed, every segment object in the bucket is one the manifest
  names (what the dead leader left half done is swept, not served and not kept).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import obstore
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from obstore.store import S3Store

from tests.cluster.conftest import YakCluster, cluster_factory, etcd, keys  # noqa: F401
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_broker_tiered import (  # noqa: F401 - `s3` is a fixture
    BUCKET,
    VALUE,
    consume_confluent,
    consume_kafka_python,
    s3,
    tiered_settings,
    wait_for,
)
from yak.tiered import Manifest
from yak.tiered.metadata import SegmentState

TOPIC = "lk"
PREFIX = "leaderkill"
RECORDS = 50_000  # x 1000 bytes: ~50 MB
BEFORE_KILL = 20_000  # produced (acks=all) before the kill; the rest while it happens
COPY_RATE = 2 << 20  # the copy quota (bytes/s): a round of several 1 MB uploads lasts seconds


def _store(weed: SeaweedS3) -> S3Store:
    return S3Store(BUCKET, endpoint=weed.endpoint, region="us-east-1", access_key_id="yak",
                   secret_access_key="yaksecret", virtual_hosted_style_request=False,
                   client_options={"allow_http": True})


def _keys(weed: SeaweedS3) -> list[str]:
    return [m["path"] for chunk in obstore.list(_store(weed), f"{PREFIX}/") for m in chunk
            if m["path"].startswith(f"{PREFIX}/{TOPIC}-")]


def _manifest(weed: SeaweedS3) -> Manifest:
    manifests = [k for k in _keys(weed) if "/manifest/" in k]
    assert manifests, "no manifest in the bucket"
    return Manifest.from_bytes(bytes(obstore.get(_store(weed), max(manifests)).bytes()))


def _produce(bootstrap: str, start: int, n: int, failed: list[object]) -> None:
    """Idempotent, acks=all: a leader change mid-way neither loses nor duplicates."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "enable.idempotence": True, "batch.size": 256 * 1024,
                  "queue.buffering.max.kbytes": 65536, "message.timeout.ms": 120_000})
    pad = b"x" * (VALUE - 8)
    for i in range(start, start + n):
        while True:
            try:
                p.produce(TOPIC, b"%08d" % i + pad, partition=0,
                          on_delivery=lambda err, _m: failed.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(150) != 0:
        failed.append("flush left records undelivered")


def _leader(c: YakCluster) -> int:
    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(TOPIC, timeout=10)
    return int(md.topics[TOPIC].partitions[0].leader)


def test_a_leader_killed_during_uploads_loses_nothing_and_uploads_nothing_twice(
        s3: SeaweedS3, cluster_factory: Callable[..., YakCluster]) -> None:  # noqa: F811
    c = cluster_factory(3, **tiered_settings(s3, PREFIX),
                        # The new leader keeps leading after the old one's restart, so
                        # its uploads show in the manifest (a preferred-leader move back
                        # before it uploaded failed the premise below once, under load).
                        **{"auto.leader.rebalance.enable": "false",
                           "remote.log.manager.orphan.grace.ms": "2000",
                           "remote.log.manager.copy.max.bytes.per.second": str(COPY_RATE)})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={
        "segment.bytes": str(1 << 20), "remote.storage.enable": "true",
        "local.retention.bytes": str(4 << 20), "min.insync.replicas": "2"})])[TOPIC].result(30)

    failed: list[object] = []
    _produce(c.bootstrap, 0, BEFORE_KILL, failed)
    assert failed == []
    # The first round finished (committed FINISHED), not only uploaded: on a quick machine
    # the first round holds every segment written so far, and a kill inside it leaves the
    # new leader nothing of the old one's to carry on from (it then rightly uploads from 0).
    wait_for(lambda: any("/manifest/" in k for k in _keys(s3))
             and len(_manifest(s3).copied) >= 5, 90, "the leader's first uploads")

    rest = threading.Thread(target=_produce, args=(c.bootstrap, BEFORE_KILL,
                                                   RECORDS - BEFORE_KILL, failed))
    rest.start()
    old = _leader(c)

    def mid_round() -> bool:
        """The newest manifest names uploads STARTED, one of them already in the bucket
        and one not yet: the leader is between uploads and their FINISHED commit."""
        listed = set(_keys(s3))
        m = _manifest(s3)
        part = f"{PREFIX}/{TOPIC}-{m.topic_id}/0"
        started = [seg.object_key(part, "log") for seg in m.segments
                   if seg.state is SegmentState.COPY_SEGMENT_STARTED]
        return any(k in listed for k in started) and any(k not in listed for k in started)
    wait_for(mid_round, 60, "a copy round with uploads done and uploads to do")
    c[old].kill()
    stale = [seg for seg in _manifest(s3).segments  # the dead leader can commit no more
             if seg.state is SegmentState.COPY_SEGMENT_STARTED]
    assert stale, "the leader finished its round before the kill"
    rest.join(200)
    assert not rest.is_alive() and failed == [], failed
    # The old leader stays down until a new leader has committed an upload of its own: a
    # restart before that could hand leadership back (an etcd session lapsing on a loaded
    # machine is enough) and leave the manifest with one uploader, which failed the
    # premise below once in CI.
    wait_for(lambda: any(seg.broker_id != old for seg in _manifest(s3).copied), 120,
             "a new leader's first upload")
    c[old].start()  # back on its data: a follower of the new leader

    def tiered_far() -> bool:
        m = _manifest(s3)
        return m.copied_upto >= RECORDS - 8_000
    wait_for(tiered_far, 120, "the new leader uploaded the rest")
    new = _leader(c)
    assert new != -1

    got = consume_confluent(c, TOPIC, 0, RECORDS, timeout=180)  # type: ignore[arg-type]
    assert got == list(range(RECORDS)), (len(got), got[:3], got[-3:])
    got = consume_kafka_python(c, TOPIC, 0, RECORDS, timeout=180)  # type: ignore[arg-type]
    assert got == list(range(RECORDS)), (len(got), got[:3], got[-3:])
    for node in (1, 2, 3):  # the beginning is only in the store
        logs = sorted((c[node].data_dir / f"{TOPIC}-0").glob("*.log"))
        assert logs and int(logs[0].stem) > BEFORE_KILL, (node, logs[:1])

    m = _manifest(s3)
    done = m.copied
    assert done and done[0].base_offset == 0
    overlaps = 0
    for a, b in zip(done, done[1:], strict=False):
        assert b.base_offset <= a.end_offset + 1, ("a hole in the remote log", a, b)
        # never the same range twice: each segment starts and ends past the one before
        assert b.base_offset > a.base_offset and b.end_offset > a.end_offset, (a, b)
        overlaps += b.base_offset <= a.end_offset
    # docs/tiered.md: a new leader's segment straddling the copied offset is uploaded whole
    # and overlaps the last one; that can only happen where the uploader changed
    changes = sum(a.broker_id != b.broker_id for a, b in zip(done, done[1:], strict=False))
    assert changes >= 1, "the manifest shows no new leader's uploads"
    assert overlaps <= changes, (overlaps, changes)

    # the dead leader's unfinished entries are swept: dropped, their objects deleted
    assert not {seg.segment_id for seg in stale} & {seg.segment_id for seg in m.segments}
    part = f"{PREFIX}/{TOPIC}-{m.topic_id}/0"
    assert not {seg.object_key(part, k) for seg in stale for k in ("log", "index")} & set(
        _keys(s3))
    assert any(f"{TOPIC}-0: swept" in c[n].log() for n in (1, 2, 3))

    def swept() -> bool:
        listed = {k for k in _keys(s3) if k.endswith(".log")}
        now = _manifest(s3)  # read after the listing: it names every upload before it
        return listed <= {seg.object_key(part, "log") for seg in now.segments}
    wait_for(swept, 60, "orphan segment objects swept after the grace")
    for node in (1, 2, 3):
        assert "Traceback" not in c[node].log(), node
    # what the crash left (timing decides: shown with -s, not asserted)
    print(f"\nleader {old} killed with {len(stale)} upload(s) STARTED, then {new} led;"
          f" {overlaps} overlap(s), {changes} uploader change(s); " + "; ".join(
              f"broker {n}: {line.split(': ', 1)[-1]}" for n in (1, 2, 3)
              for line in c[n].log().splitlines()
              if f"{TOPIC}-0: swept" in line or f"{TOPIC}-0: deleted" in line))
