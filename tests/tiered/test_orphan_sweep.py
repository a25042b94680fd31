"""Orphan objects in the bucket (issue 25): segment files that no manifest version names (a
leader that crashed between its upload and its commit, an upload that landed after a new
leader swept its entry) are deleted by the partition's leader when its leadership starts,
once they are older than `remote.log.manager.orphan.grace.ms`; younger ones are looked at
again when they are old enough, and nothing a manifest names, no manifest and no file
with a foreign name is ever touched.

- the remote log manager on real logs and a real `file://` store (object ages set with
  `os.utime`, which is the store's last-modified time);
- a broker process and SeaweedFS: an orphan injected while the broker leads stays until
  the next leadership (a restart), then goes; every record still reads back.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import obstore
import pytest
from obstore.store import S3Store

from tests.conftest import YakBroker
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_broker_tiered import (  # noqa: F401 - `s3` is a fixture
    BUCKET,
    bucket_manifest,
    consume_confluent,
    create_topic,
    produce,
    s3,
    tiered_settings,
    wait_for,
)
from tests.tiered.test_remote_log import (  # noqa: F401 - `rm` is a fixture
    TID,
    expected,
    fetch_all,
    lead,
    make_rlm,
    rm,
)
from tests.tiered.test_remote_log import produce as produce_local
from tests.tiered.test_remote_log import round_ as one_round
from yak.partition import ReplicaManager
from yak.tiered import Manifest, RemoteLogSegmentMetadata, SegmentState
from yak.tiered.metadata import partition_dir
from yak.tiered.orphans import find_orphans, segment_id_of

GRACE_MS = 60_000


def _orphan_name(base: int, kind: str = "log") -> str:
    return f"{base:020d}-{uuid.uuid4().hex}.{kind}"


def test_segment_file_names_and_the_grace_period() -> None:
    sid = uuid.uuid4().hex
    assert segment_id_of(f"{7:020d}-{sid}.leader-epoch-checkpoint") == sid
    assert segment_id_of(f"{7:020d}-{sid}.snapshot") == sid
    for foreign in ("notes.txt", f"{7:020d}-{sid}.bak", f"7-{sid}.log",
                    f"{7:020d}-{sid[:-1]}.log", "00000000000000000007.json"):
        assert segment_id_of(foreign) is None, foreign
    d = "t-x/0"
    named = uuid.uuid4().hex
    m = Manifest("t", 0, "x", segments=(RemoteLogSegmentMetadata(
        named, 0, 9, 0, 10, [(0, 0)], SegmentState.COPY_SEGMENT_STARTED),))
    now = 1_000_000
    listing = [
        (f"{d}/{0:020d}-{named}.log", 10, now - 10 * GRACE_MS),     # named (even STARTED)
        (f"{d}/{10:020d}-{'a' * 32}.log", 10, now - GRACE_MS),      # orphan, old enough
        (f"{d}/{10:020d}-{'a' * 32}.index", 10, now - GRACE_MS - 1),
        (f"{d}/{20:020d}-{'b' * 32}.log", 10, now - 5),             # orphan, too young
        (f"{d}/{30:020d}-{'c' * 32}.log", 10, now - 100),           # orphan, too young
        (f"{d}/manifest/{3:020d}.json", 10, now - 10 * GRACE_MS),   # never
        (f"{d}/notes.txt", 10, now - 10 * GRACE_MS),                # never
        (f"{d}0/{0:020d}-{'d' * 32}.log", 10, now - 10 * GRACE_MS),  # partition 10's
    ]
    old, due = find_orphans(listing, d, m, now, GRACE_MS)
    assert sorted(old) == [f"{d}/{10:020d}-{'a' * 32}.index", f"{d}/{10:020d}-{'a' * 32}.log"]
    assert due == now - 100 + GRACE_MS


def test_the_leader_sweeps_orphans_when_its_leadership_starts(rm: ReplicaManager,  # noqa: F811
                                                              tmp_path: Path) -> None:
    lead(rm)
    produce_local(rm, 60)
    store = tmp_path / "bucket"
    d = partition_dir("t", str(TID), 0)
    root = store / d

    def put(name: str, age_ms: int) -> Path:
        path = root / name
        path.write_bytes(b"orphan")
        t = time.time() - age_ms / 1000
        os.utime(path, (t, t))
        return path

    async def main() -> None:
        rlm = make_rlm(rm, store, orphan_grace_ms=GRACE_MS)
        await rlm.start()
        await one_round(rlm)  # the leadership's first round: uploads, nothing to sweep
        m = rlm._states[("t", 0)].manifest
        assert m is not None and m.copied
        named = {s.object_key(d, k) for s in m.segments for k in s.files}
        old = [put(_orphan_name(10_000 + i, kind), 2 * GRACE_MS)
               for i, kind in enumerate(("log", "index", "snapshot"))]
        young = put(_orphan_name(20_000), 1000)
        foreign = put("notes.txt", 2 * GRACE_MS)

        await one_round(rlm)  # the same leadership: not looked at again
        assert all(p.exists() for p in [*old, young, foreign])

        lead(rm, epoch=1)  # a new leadership: its first round sweeps
        await one_round(rlm)
        assert not any(p.exists() for p in old)
        assert young.exists() and foreign.exists()
        keys = {k for k, _ in await rlm.store.list(f"{d}/")}
        assert named <= keys  # nothing a manifest names was touched
        assert rlm.orphans_deleted == 3
        # The young one is looked at again when it passes the grace period.
        due = rlm._states[("t", 0)].orphans_due_ms
        assert abs(due - (young.stat().st_mtime * 1000 + GRACE_MS)) < 5
        assert (await fetch_all(rm)) == (expected(600), [])
        await rlm.stop()
    asyncio.run(main())


def test_an_orphan_in_the_bucket_goes_at_the_next_leadership(
        s3: SeaweedS3, broker_factory: Callable[..., YakBroker]) -> None:  # noqa: F811
    b = broker_factory(**tiered_settings(s3, "orphans"),
                       **{"remote.log.manager.orphan.grace.ms": "2000"})
    create_topic(b, "orph", **{"segment.bytes": str(256 << 10), "remote.storage.enable": "true",
                               "local.retention.bytes": str(512 << 10)})
    produce(b, "orph", 0, 2000)
    def copied() -> int:
        try:
            return len(bucket_manifest(s3, "orphans")[1].copied)
        except AssertionError:  # no manifest yet
            return 0
    wait_for(lambda: copied() >= 3, 60, "uploads")
    _keys, m = bucket_manifest(s3, "orphans")
    d = partition_dir("orph", m.topic_id, 0)
    store = S3Store(BUCKET, endpoint=s3.endpoint, region="us-east-1", access_key_id="yak",
                    secret_access_key="yaksecret", virtual_hosted_style_request=False,
                    client_options={"allow_http": True})
    orphans = [f"orphans/{d}/{_orphan_name(90_000, kind)}" for kind in ("log", "index")]
    foreign = f"orphans/{d}/notes.txt"
    for k in [*orphans, foreign]:
        obstore.put(store, k, b"orphan")

    def present() -> set[str]:
        return {meta["path"] for chunk in obstore.list(store, f"orphans/{d}")
                for meta in chunk}
    time.sleep(3)  # past the grace period, but the leadership is the same: kept
    assert set(orphans) <= present()

    b.stop(30)
    b.start()  # a new leadership: the first round sweeps them
    wait_for(lambda: not set(orphans) & present(), 60, "orphans deleted")
    _keys, m2 = bucket_manifest(s3, "orphans")
    named = {f"orphans/{s.object_key(d, k)}" for s in m2.segments for k in s.files}
    assert named <= present() and foreign in present()
    assert consume_confluent(b, "orph", 0, 2000) == list(range(2000))
    text = b.log()
    assert "orphan remote object" in text and "Traceback" not in text


def test_a_late_upload_of_a_swept_entry_is_deleted_after_the_grace(
        rm: ReplicaManager, tmp_path: Path) -> None:  # noqa: F811
    """A leader dies between its COPY_SEGMENT_STARTED commit and its uploads' end; the
    next leader sweeps the entry at once, and an upload of the dead leader that lands
    afterwards is an orphan, deleted once the grace period after the sweep has passed."""
    lead(rm)
    produce_local(rm, 60)
    store = tmp_path / "bucket"
    d = partition_dir("t", str(TID), 0)
    grace_ms = 300

    async def main() -> None:
        rlm = make_rlm(rm, store, orphan_grace_ms=grace_ms)
        await rlm.start()
        real = rlm.manifests.commit
        calls = 0

        async def dying(old: Manifest, new: Manifest) -> bool:
            nonlocal calls
            calls += 1
            if calls > 1:
                raise asyncio.CancelledError()  # the process is gone
            return await real(old, new)
        rlm.manifests.commit = dying  # type: ignore[method-assign]
        with pytest.raises(asyncio.CancelledError):
            await rlm._leader_round(rlm._tiered()[0], rlm._states[("t", 0)])
        started = [s for s in (await rlm.manifests.load("t", str(TID), 0)).segments
                   if s.state is SegmentState.COPY_SEGMENT_STARTED]
        assert started
        await rlm.stop()

        lead(rm, epoch=1)
        new = make_rlm(rm, store, orphan_grace_ms=grace_ms)
        await new.start()
        await one_round(new)  # sweeps the STARTED entries and their objects
        m = new._states[("t", 0)].manifest
        assert m is not None
        assert not {s.segment_id for s in started} & {s.segment_id for s in m.segments}
        late = store / started[0].object_key(d, "log")  # the dead leader's upload lands
        late.write_bytes(b"late")
        t = time.time() - 2 * grace_ms / 1000
        os.utime(late, (t, t))
        await asyncio.sleep(2 * grace_ms / 1000)
        await one_round(new)
        assert not late.exists()
        assert (await fetch_all(rm)) == (expected(600), [])
        await new.stop()
    asyncio.run(main())
