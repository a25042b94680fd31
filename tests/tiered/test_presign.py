"""Presigned URLs of tiered segments, handed out by the broker's embedded gateway
(`GET /tiered/v1/topics/{topic}/partitions/{partition}/segments`, issue 25).

Real parts only: SeaweedFS's S3 gateway on 127.0.0.1 with an identity (`-s3.config`), so
the store itself checks signatures and refuses anonymous reads of the bucket; one broker
process with tiering on and the gateway on HTTP; httpx as the only client of the URLs.

- the answer lists the remote segments from the one holding `from`, with their offsets,
  sizes and epochs, and URLs of `.log`/`.index` for those overlapping [from, to);
- a presigned URL reads the object's bytes (whole and ranged) with no credentials, where
  an unsigned GET of the same object is refused; a bad signature and an expired URL are
  refused by the store (403);
- refusals: unknown topic or partition 404, a topic not tiered 409, bad from/to/expires
  422, a broker without remote storage 409; with an authorizer and HTTP Basic callers, a
  user without READ on the topic gets 403 and no URL, a user with READ gets the URLs;
- a `file://` store cannot presign (one clear error).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import obstore
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from obstore.store import S3Store

from tests.conftest import YakBroker, free_port
from tests.tiered.seaweed import SeaweedS3
from tests.waiting import wait_until
from yak.tiered import Manifest, RemoteStore, parse_uri
from yak.tiered.store import PresignUnsupportedError

pytestmark = pytest.mark.timeout(300)

BUCKET = "yak-presign"
KEY, SECRET = "yak", "yaksecret"


def authed_seaweed(workdir: Path) -> SeaweedS3:
    """SeaweedFS whose bucket `BUCKET` only identity `yak` may use: anonymous requests
    may touch nothing but the readiness probe's bucket (`SeaweedS3.start` makes it
    unsigned), so a read without a valid signature is refused, as on AWS."""
    probe = f"yak-probe-{os.getpid()}"
    cfg = workdir / "s3.json"
    cfg.write_text(json.dumps({"identities": [
        {"name": KEY, "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
         "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
        {"name": "anonymous",
         "actions": [f"{a}:{probe}" for a in ("Admin", "Read", "Write", "List")]}]}))
    weed = SeaweedS3(str(workdir), s3_config=str(cfg))
    weed.start()
    # CreateBucket as `yak`: a presigned PUT of the bucket itself (no S3 client here
    # signs bucket requests; obstore signs object paths, and "" is the bucket).
    url = obstore.sign(bucket_store(weed), "PUT", "", timedelta(seconds=60))
    r = httpx.put(url, timeout=10)
    assert r.status_code == 200, r.text
    return weed


def authed_s3_fixture(name: str) -> Callable[..., Iterator[SeaweedS3]]:
    """A test module's `s3` fixture (module scope): `authed_seaweed` in a temporary
    directory named `name`; `s3 = authed_s3_fixture("...")` at the module's top level."""

    @pytest.fixture(scope="module")
    def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
        weed = authed_seaweed(tmp_path_factory.mktemp(name))
        yield weed
        weed.stop()

    return s3


@contextmanager
def tiered_broker(s3: SeaweedS3, base: Path, prefix: str, *,
                  gateway: bool = True) -> Iterator[YakBroker]:
    """A broker tiering to `s3` under `prefix`, its data in `base`/data; with its
    embedded HTTP gateway at `.url` unless `gateway` is False. Stopped (killed if it
    does not stop in 10 s) on leaving."""
    data = base / "data"
    data.mkdir()
    b = YakBroker(data, tiered_settings(s3, prefix),
                  http=f"127.0.0.1:{free_port()}" if gateway else None).start()
    if gateway:
        b.url = f"http://{b.http}"  # type: ignore[attr-defined]
    try:
        yield b
    finally:
        try:
            b.stop(10)
        finally:
            b.kill()


def bucket_store(s3: SeaweedS3) -> S3Store:
    return S3Store(BUCKET, endpoint=s3.endpoint, region="us-east-1", access_key_id=KEY,
                   secret_access_key=SECRET, virtual_hosted_style_request=False,
                   client_options={"allow_http": True})


def store_uri(s3: SeaweedS3, prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}?endpoint={s3.endpoint}&region=us-east-1"


def tiered_settings(s3: SeaweedS3, prefix: str) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true",
            "remote.storage.uri": store_uri(s3, prefix),
            "remote.storage.access.key.id": KEY, "remote.storage.secret.access.key": SECRET,
            "remote.log.manager.task.interval.ms": "300",
            "remote.log.manager.task.retry.backoff.max.ms": "1000",
            "remote.fetch.max.wait.ms": "5000"}


def create_topic(admin: AdminClient, name: str, partitions: int, tiered: bool = True) -> None:
    config = {"segment.bytes": str(256 << 10), "remote.storage.enable": "true",
              "local.retention.bytes": str(256 << 10)} if tiered else {}
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)


def produce(config: dict[str, str], topic: str, partitions: int, n: int) -> None:
    p = Producer({**config, "acks": "all", "linger.ms": 10, "batch.size": 64 * 1024})
    for i in range(n):
        p.produce(topic, key=b"k%d" % (i % 97), value=b"v%07d-" % i + b"x" * (150 + i % 200),
                  partition=i % partitions, headers=[("h", b"%d" % i)] if i % 5 == 0 else None)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def manifest(s3: SeaweedS3, prefix: str, topic: str, partition: int) -> Manifest | None:
    store = bucket_store(s3)
    keys = [m["path"] for chunk in obstore.list(store, f"{prefix}/") for m in chunk
            if m["path"].startswith(f"{prefix}/{topic}-")
            and f"/{partition}/manifest/" in m["path"]]
    if not keys:
        return None
    return Manifest.from_bytes(bytes(obstore.get(store, max(keys)).bytes()))


def wait_tiered(b: YakBroker, s3: SeaweedS3, prefix: str, topic: str, partitions: int,
                upto: int) -> None:
    """Until every partition's remote log holds [0, upto) and its local log starts above 0
    (the oldest records are only in the bucket)."""
    def local_start(p: int) -> int:
        logs = list((b.data_dir / f"{topic}-{p}").glob("*.log"))
        return min(int(x.stem) for x in logs) if logs else 0

    def done() -> bool:
        for p in range(partitions):
            m = manifest(s3, prefix, topic, p)
            if m is None or m.copied_upto < upto or local_start(p) == 0:
                return False
        return True
    wait_until(done, 90, f"{topic} tiered up to {upto} and deleted locally", every=0.3)


def segments(url: str, topic: str, partition: int, auth: tuple[str, str] | None = None,
             **params: object) -> httpx.Response:
    return httpx.get(f"{url}/tiered/v1/topics/{topic}/partitions/{partition}/segments",
                     params={k.rstrip("_"): v for k, v in params.items()}, auth=auth,
                     timeout=30)


s3 = authed_s3_fixture("seaweed-presign")


@pytest.fixture(scope="module")
def broker(s3: SeaweedS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakBroker]:
    with tiered_broker(s3, tmp_path_factory.mktemp("yak-presign"), "pre") as b:
        yield b


@pytest.fixture(scope="module")
def tiered_topic(broker: YakBroker, s3: SeaweedS3) -> str:
    topic = "presigned"
    create_topic(AdminClient({"bootstrap.servers": broker.bootstrap}), topic, 1)
    produce({"bootstrap.servers": broker.bootstrap}, topic, 1, 4000)
    wait_tiered(broker, s3, "pre", topic, 1, 1500)
    return topic


def test_the_answer_lists_segments_and_urls_that_read_them(broker, s3, tiered_topic) -> None:
    m = manifest(s3, "pre", tiered_topic, 0)
    assert m is not None
    r = segments(broker.url, tiered_topic, 0)
    assert r.status_code == 200, r.text
    ans = r.json()
    copied = sorted(m.copied, key=lambda s: s.base_offset)
    assert len(copied) >= 3
    assert ans["topic_id"] == m.topic_id and ans["start_offset"] == m.start_offset
    assert ans["expires_s"] == 900
    # at least the manifest this test read (uploads may have gone on since)
    listed = [(s["segment_id"], s["base_offset"], s["end_offset"], s["size"])
              for s in ans["segments"]]
    assert listed[:len(copied)] == [(s.segment_id, s.base_offset, s.end_offset, s.size)
                                    for s in copied]
    assert all(s["leader_epochs"] and s["state"] == "COPY_SEGMENT_FINISHED"
               for s in ans["segments"])
    assert all({"log", "index"} <= set(s["urls"]) for s in ans["segments"])

    store = bucket_store(s3)
    seg = copied[1]
    part_dir = f"pre/{tiered_topic}-{m.topic_id}/0"
    want = bytes(obstore.get(store, seg.object_key(part_dir, "log")).bytes())
    url = ans["segments"][1]["urls"]["log"]
    assert "X-Amz-Signature=" in url and SECRET not in url
    got = httpx.get(url, timeout=30)  # no credentials: the URL is the credential
    assert got.status_code == 200 and got.content == want and len(want) == seg.size
    part = httpx.get(url, headers={"Range": "bytes=100-4195"}, timeout=30)
    assert part.status_code == 206 and part.content == want[100:4196]
    # the same object unsigned, or with a signature that is not the store's: refused
    bare = httpx.get(url.split("?", 1)[0], timeout=30)
    assert bare.status_code == 403, bare.text
    sig = url.rsplit("X-Amz-Signature=", 1)[1]
    forged = url[:-len(sig)] + ("0" if sig[0] != "0" else "1") + sig[1:]
    bad = httpx.get(forged, timeout=30)
    assert bad.status_code == 403 and "SignatureDoesNotMatch" in bad.text
    # a URL for one object reads that object only
    other = url.replace(f"{seg.base_offset:020d}-{seg.segment_id}.log",
                        f"{seg.base_offset:020d}-{seg.segment_id}.index")
    assert httpx.get(other, timeout=30).status_code == 403


def test_from_and_to_clip_what_is_signed(broker, s3, tiered_topic) -> None:
    m = manifest(s3, "pre", tiered_topic, 0)
    assert m is not None
    copied = sorted(m.copied, key=lambda s: s.base_offset)
    mid = copied[1]
    start = mid.base_offset + 1  # inside the second segment
    end = copied[2].base_offset  # up to the third, exclusive
    ans = segments(broker.url, tiered_topic, 0, from_=start, to=end, expires=60).json()
    segs = ans["segments"]
    assert segs[0]["segment_id"] == mid.segment_id  # the one holding `from` comes first
    assert ans["expires_s"] == 60
    assert ans["expires_at_ms"] == pytest.approx(time.time() * 1000 + 60_000, abs=30_000)
    assert {"log", "index"} <= set(segs[0]["urls"])
    for s in segs[1:]:  # at or past `to`: listed, no records signed
        assert "log" not in s["urls"] and "index" not in s["urls"]
    # `to` below `from`: an empty range, nothing of the records signed
    empty = segments(broker.url, tiered_topic, 0, from_=end, to=start)
    assert empty.status_code == 200
    assert all("log" not in s["urls"] for s in empty.json()["segments"])


def test_an_expired_url_is_refused_by_the_store(broker, tiered_topic) -> None:
    ans = segments(broker.url, tiered_topic, 0, expires=1).json()
    url = ans["segments"][0]["urls"]["log"]
    time.sleep(2.5)
    r = httpx.get(url, timeout=30)
    assert r.status_code == 403 and "expired" in r.text.lower()


def test_refusals(broker, s3) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "local-only", 1, tiered=False)
    create_topic(admin, "tiered-empty", 1)
    url = broker.url

    def err(r: httpx.Response, status: int, code: int | None = None) -> str:
        assert r.status_code == status, r.text
        body = r.json()
        if code is not None:
            assert body["error_code"] == code, body
        assert "\n" not in body["message"]
        return str(body["message"])

    err(segments(url, "no-such-topic", 0), 404, 40401)
    err(segments(url, "tiered-empty", 7), 404, 40402)
    assert "not tiered" in err(segments(url, "local-only", 0), 409, 40910)
    for bad in ({"expires": 0}, {"expires": 7 * 24 * 3600 + 1}, {"expires": "soon"},
                {"from_": -1}, {"to": -3}):
        err(segments(url, "tiered-empty", 0, **bad), 422)
    # tiered, nothing uploaded yet: no segments, everything is read through the brokers
    r = segments(url, "tiered-empty", 0)
    assert r.status_code == 200 and r.json()["segments"] == []
    assert r.json()["start_offset"] is None
    assert "Traceback" not in broker.log()


def test_a_broker_without_remote_storage_hands_out_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    b = YakBroker(data, {}, http=f"127.0.0.1:{free_port()}").start()
    try:
        create_topic(AdminClient({"bootstrap.servers": b.bootstrap}), "t", 1, tiered=False)
        r = segments(f"http://{b.http}", "t", 0)
        assert r.status_code == 409 and r.json()["error_code"] == 40911
        assert "no remote storage" in r.json()["message"]
    finally:
        b.stop(10)
        b.kill()


def test_a_file_store_cannot_presign(tmp_path: Path) -> None:
    store = RemoteStore(parse_uri(f"file://{tmp_path}/remote"))
    with pytest.raises(PresignUnsupportedError, match="cannot be presigned"):
        asyncio.run(store.presign(["a/b.log"], 60))
