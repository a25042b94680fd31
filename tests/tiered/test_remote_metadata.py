"""The remote log metadata in the metadata store (issue 25, docs/tiered.md "Where the
metadata lives"), on a real local metadata store (`LocalKV`, the single broker's, in a file),
real logs and a real `file://` bucket, without a broker:

- the store's copy: one key per segment and a head, a compare-and-set on the version (two
  writers of one version: one wins), read back by another client of the same file;
- the remote log manager commits there first and publishes the same version to the bucket;
- a crash between the two writes (the publication dies after the commit), during a copy and
  during a remote deletion: the bucket never names an object that is not there, and the
  next leader republishes, sweeps and carries on without uploading a segment twice;
- a store that holds nothing for a partition (a fresh cluster, manifests of before) takes
  the bucket's manifest and carries on from it.

tests/tiered/test_cluster_remote_metadata.py does the same through etcd and broker processes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.tiered.test_remote_log import (  # noqa: F401 - `rm` is a fixture
    CFG,
    TID,
    expected,
    fetch_all,
    lead,
    make_rlm,
    produce,
    rm,
    round_,
)
from yak.cluster.etcd import EtcdClient
from yak.cluster.layout import ClusterKeys
from yak.cluster.local_kv import LocalKV
from yak.cluster.remote_log_metadata import KVRemoteLogMetadata
from yak.devcluster.local import free_ports
from yak.partition import ReplicaManager
from yak.storage import LogConfig
from yak.tiered import (
    Manifest,
    ManifestStore,
    RemoteLogManager,
    RemoteStorageError,
    SegmentState,
)
from yak.tiered.metadata import RemoteLogSegmentMetadata, partition_dir

KEYS = ClusterKeys("t")
D = partition_dir("t", str(TID), 0)


def backend(path: Path) -> KVRemoteLogMetadata:
    return KVRemoteLogMetadata(LocalKV(path).open_sync(), KEYS)


def with_kv(manager: ReplicaManager, bucket: Path, kv_file: Path, **kw: object
            ) -> RemoteLogManager:
    """A remote log manager on the metadata store in `kv_file` (opened afresh: a restart)."""
    rlm = make_rlm(manager, bucket, **kw)
    rlm.manifests.backend = backend(kv_file)
    return rlm


def seg(base: int, end: int, state: SegmentState = SegmentState.COPY_SEGMENT_FINISHED
        ) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentMetadata.new_id(), base, end, 1000,
                                    end - base + 1, [(0, base)], state, {"log": (10, 7)})


def by_id(segments: tuple[RemoteLogSegmentMetadata, ...]) -> list[RemoteLogSegmentMetadata]:
    return sorted(segments, key=lambda s: s.segment_id)


async def raw_keys(path: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    kv = LocalKV(path).open_sync()  # another reader of the file: what was persisted
    prefix = KEYS.remote_log_partition(str(TID), 0)
    r = await kv.range(prefix, prefix=True)
    return {k.key[len(prefix):]: json.loads(k.value) for k in r.kvs}


async def bucket_objects(rlm: RemoteLogManager) -> set[str]:
    return {k for k, _ in await rlm.store.list(f"{D}/") if "/manifest/" not in k}


async def assert_bucket_names_only_what_is_there(rlm: RemoteLogManager) -> Manifest:
    m = await ManifestStore(rlm.store).load("t", str(TID), 0)
    there = await bucket_objects(rlm)
    for s in m.copied:
        missing = {s.object_key(D, k) for k in s.files} - there
        assert not missing, f"the bucket's manifest v{m.version} names missing {missing}"
    return m


def test_one_key_per_segment_and_a_compare_and_set_on_the_version(tmp_path: Path) -> None:
    async def main() -> None:
        # Three brokers' views (each its own cache of the head) of one store.
        kv = LocalKV(tmp_path / "kv.json").open_sync()
        a, b, c = (KVRemoteLogMetadata(kv, KEYS) for _ in range(3))
        assert await a.load("t", str(TID), 0) is None
        empty = Manifest("t", 0, str(TID))
        v1 = Manifest("t", 0, str(TID), 1, 3, 1, 0, (seg(0, 99), seg(100, 199)))
        assert await a.commit(empty, v1)
        assert not await a.commit(empty, Manifest("t", 0, str(TID), 1, 3, 2, 0, (seg(0, 9),)))
        keys = await raw_keys(tmp_path / "kv.json")
        assert sorted(keys) == ["head", *sorted(
            f"segments/{s.base_offset:020d}-{s.segment_id}" for s in v1.segments)]
        assert keys["head"]["version"] == 1 and keys["head"]["broker_id"] == 1

        # Another broker (no cached head) commits v2 with one segment changed, one dropped,
        # one added; a writer still at v1 then loses.
        loaded = await c.load("t", str(TID), 0)
        assert loaded is not None and loaded.segments == v1.segments
        v2 = Manifest("t", 0, str(TID), 2, 4, 2, 100, (
            v1.segments[1].with_state(SegmentState.DELETE_SEGMENT_STARTED, 5), seg(200, 299)))
        assert await c.commit(loaded, v2)
        assert not await b.commit(v1, Manifest("t", 0, str(TID), 2, 3, 1, 0, ()))
        got = await b.load("t", str(TID), 0)
        assert got is not None and got.version == 2 and got.leader_epoch == 4
        assert got.log_start_offset == 100 and by_id(got.segments) == by_id(v2.segments)
        assert len(await raw_keys(tmp_path / "kv.json")) == 3  # head + the two segments

        # Topic deletion forgets the topic; keys without a head are not a version.
        await b.delete_topic(str(TID))
        assert await raw_keys(tmp_path / "kv.json") == {}
        await kv.put(KEYS.remote_log_partition(str(TID), 0) + "segments/x",
                     json.dumps(seg(0, 1).to_json()))
        assert await c.load("t", str(TID), 0) is None
    asyncio.run(main())


def test_an_unreachable_metadata_store_is_a_retriable_storage_error() -> None:
    """Nothing listens on the port: the manager backs off (a WARNING line) and a remote
    read answers KAFKA_STORAGE_ERROR, as for the bucket's failures."""
    async def main() -> None:
        client = EtcdClient(f"127.0.0.1:{free_ports(1)[0]}", timeout=1.0,
                            connect_timeout=0.3)
        b = KVRemoteLogMetadata(client, KEYS)
        try:
            with pytest.raises(RemoteStorageError, match="metadata store"):
                await b.load("t", str(TID), 0)
            with pytest.raises(RemoteStorageError, match="metadata store"):
                await b.commit(Manifest("t", 0, str(TID)),
                               Manifest("t", 0, str(TID), 1, 0, 1, 0, (seg(0, 9),)))
        finally:
            await client.aclose()
    asyncio.run(main())


def test_a_long_manifest_adopted_into_an_empty_store_in_batches(tmp_path: Path) -> None:
    async def main() -> None:
        a = backend(tmp_path / "kv.json")
        big = Manifest("t", 0, str(TID), 7, 2, 1, 0,
                       tuple(seg(i * 10, i * 10 + 9) for i in range(300)))
        assert await a.commit(Manifest("t", 0, str(TID)), big)
        got = await backend(tmp_path / "kv.json").load("t", str(TID), 0)
        assert got is not None and got.version == 7 and by_id(got.segments) == by_id(big.segments)
        with pytest.raises(ValueError):  # a later commit may not change that many at once
            await a.commit(big, Manifest("t", 0, str(TID), 8, 2, 1, 0, ()))
    asyncio.run(main())


def test_the_metadata_store_commits_and_the_bucket_follows(rm: ReplicaManager,  # noqa: F811
                                                             tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 60)

    async def main() -> None:
        rlm = with_kv(rm, tmp_path / "bucket", tmp_path / "kv.json")
        await rlm.start()
        await round_(rlm)
        m = rlm._states[("t", 0)].manifest
        assert m is not None and len(m.copied) >= 2
        keys = await raw_keys(tmp_path / "kv.json")
        assert keys["head"]["version"] == m.version
        assert {k for k in keys if k != "head"} == {
            f"segments/{s.base_offset:020d}-{s.segment_id}" for s in m.segments}
        assert all(v["state"] == "COPY_SEGMENT_FINISHED" for k, v in keys.items() if k != "head")
        published = await ManifestStore(rlm.store).load("t", str(TID), 0)
        assert published.version == m.version and by_id(published.segments) == by_id(m.segments)
        await rlm.stop()
    asyncio.run(main())


def dies_on_publish(rlm: RemoteLogManager, nth: int) -> None:
    """The broker dies (the task is cancelled, nothing after runs) at its `nth` bucket
    publication from now: after the metadata store committed that version."""
    real = rlm.manifests.bucket.commit
    calls = 0

    async def dying(m: Manifest) -> bool:
        nonlocal calls
        calls += 1
        if calls >= nth:
            raise asyncio.CancelledError()  # the process is gone
        return await real(m)
    rlm.manifests.bucket.commit = dying  # type: ignore[method-assign]


def test_a_crash_between_commit_and_publication_of_a_copy(rm: ReplicaManager,  # noqa: F811
                                                          tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 60)

    async def dead_leader() -> tuple[dict[str, tuple[int, int]], set[str]]:
        rlm = with_kv(rm, tmp_path / "bucket", tmp_path / "kv.json")
        await rlm.start()
        # STARTED committed and published, uploads done, FINISHED committed: then it dies.
        dies_on_publish(rlm, 2)
        with pytest.raises(asyncio.CancelledError):
            await rlm._leader_round(rlm._tiered()[0], rlm._states[("t", 0)])
        stored = await rlm.manifests.backend.load("t", str(TID), 0)  # type: ignore[union-attr]
        assert stored is not None and stored.copied and stored.version == 2
        published = await assert_bucket_names_only_what_is_there(rlm)
        assert published.version == 1 and not published.copied  # one behind: STARTED only
        first_ids = {s.segment_id: (s.base_offset, s.end_offset) for s in stored.copied}
        objects_before = await bucket_objects(rlm)
        await rlm.stop()
        return first_ids, objects_before

    first_ids, objects_before = asyncio.run(dead_leader())
    lead(rm, epoch=1)
    produce(rm, 30, start=600)

    async def next_leader() -> None:
        new = with_kv(rm, tmp_path / "bucket", tmp_path / "kv.json")
        await new.start()
        await round_(new)
        assert new.manifests.repairs == 1  # the lost publication, republished
        m = new._states[("t", 0)].manifest
        assert m is not None
        # No segment uploaded twice: the dead leader's finished ones kept, the new ones after.
        assert {s.segment_id: (s.base_offset, s.end_offset) for s in m.copied
                if s.segment_id in first_ids} == first_ids
        upto = max(e for _b, e in first_ids.values())
        assert all(s.base_offset > upto for s in m.copied if s.segment_id not in first_ids)
        assert objects_before <= await bucket_objects(new)
        published = await assert_bucket_names_only_what_is_there(new)
        assert published.version == m.version and by_id(published.segments) == by_id(m.segments)
        values, errors = await fetch_all(rm)
        assert not errors and values == expected(900)
        await new.stop()
    asyncio.run(next_leader())


def test_a_crash_between_commit_and_publication_of_a_deletion(rm: ReplicaManager,  # noqa: F811
                                                              tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 150)

    async def main() -> None:
        rlm = with_kv(rm, tmp_path / "bucket", tmp_path / "kv.json")
        await rlm.start()
        await round_(rlm)
        await round_(rlm)  # everything below the bound copied: the next commit deletes
        rm.update_config("t", LogConfig.from_props(
            {"retention.bytes": "100000", "local.retention.bytes": "30000"}, base=CFG))
        # DELETE_SEGMENT_STARTED committed in the store, its publication dies: the objects
        # must still be there, since the bucket's manifest names them FINISHED.
        dies_on_publish(rlm, 1)
        with pytest.raises(asyncio.CancelledError):
            await rlm._leader_round(rlm._tiered()[0], rlm._states[("t", 0)])
        stored = await rlm.manifests.backend.load("t", str(TID), 0)  # type: ignore[union-attr]
        assert stored is not None
        doomed = [s for s in stored.segments if s.state is SegmentState.DELETE_SEGMENT_STARTED]
        assert doomed and stored.log_start_offset > 0
        published = await assert_bucket_names_only_what_is_there(rlm)
        assert {s.segment_id for s in doomed} <= {s.segment_id for s in published.copied}
        await rlm.stop()

        lead(rm, epoch=1)
        new = with_kv(rm, tmp_path / "bucket", tmp_path / "kv.json")
        await new.start()
        await round_(new)
        m = new._states[("t", 0)].manifest
        assert m is not None and new.manifests.repairs == 1
        assert not {s.segment_id for s in doomed} & {s.segment_id for s in m.segments}
        gone = {s.object_key(D, k) for s in doomed for k in s.files}
        assert not gone & await bucket_objects(new)
        published = await assert_bucket_names_only_what_is_there(new)
        assert published.version == m.version and published.log_start_offset >= \
            stored.log_start_offset
        await new.stop()
    asyncio.run(main())


def test_an_empty_store_carries_on_from_the_bucket_alone(rm: ReplicaManager,  # noqa: F811
                                                         tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 60)

    async def bucket_only() -> Manifest:
        old = make_rlm(rm, tmp_path / "bucket")  # manifests in the bucket only
        await old.start()
        await round_(old)
        before = old._states[("t", 0)].manifest
        assert before is not None and before.copied
        await old.stop()
        return before

    before = asyncio.run(bucket_only())
    lead(rm, epoch=1)
    produce(rm, 30, start=600)

    async def main() -> None:
        new = with_kv(rm, tmp_path / "bucket", tmp_path / "kv.json")
        await new.start()
        await round_(new)
        assert new.manifests.adopted == 1
        m = new._states[("t", 0)].manifest
        assert m is not None and m.version > before.version
        ids = {s.segment_id for s in before.copied}
        assert ids <= {s.segment_id for s in m.copied}  # none uploaded again
        upto = before.copied_upto
        assert all(s.base_offset >= upto for s in m.copied if s.segment_id not in ids)
        keys = await raw_keys(tmp_path / "kv.json")
        assert keys["head"]["version"] == m.version
        assert len(keys) == len(m.segments) + 1
        values, errors = await fetch_all(rm)
        assert not errors and values == expected(900)
        await new.stop()
    asyncio.run(main())
