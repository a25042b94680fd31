"""The remote log manager on real logs and a real `file://` store, without a broker: copy,
local retention bounded by the upload point, reads below the local start through the
replica manager's fetch path, ListOffsets, a new leader carrying on, two leaders racing
for one manifest version, sweeping, remote retention and corrupt objects.
(tests/tiered/test_broker_tiered.py does the same over the wire with SeaweedFS.)
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from yak.errors import ErrorCode, InvalidConfigurationError
from yak.partition import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    FetchIsolation,
    FetchParams,
    FetchPartition,
    PartitionState,
    ReplicaManager,
)
from yak.protocol.records import Record, build_batch, decode_records, iter_batches
from yak.storage import LogConfig, LogManager
from yak.tiered import (
    HostedPartition,
    Manifest,
    ManifestStore,
    RemoteLogManager,
    SegmentState,
    TieredConfig,
)
from yak.tiered.manager import _Fenced
from yak.tiered.metadata import partition_dir

ME = 1
TID = uuid.uuid4()
CFG = LogConfig.from_props({
    "segment.bytes": "20000", "remote.storage.enable": "true",
    "local.retention.bytes": "30000", "index.interval.bytes": "1000"})


@pytest.fixture
def rm(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    manager = ReplicaManager(ME, logs)
    yield manager
    manager.io_pool.shutdown(wait=True)
    logs.shutdown()


def make_rlm(rm: ReplicaManager, store_dir: Path, **kw: object) -> RemoteLogManager:
    cfg = TieredConfig(enabled=True, uri=f"file://{store_dir}", task_interval_ms=3_600_000,
                       retry_backoff_ms=0, **kw)  # type: ignore[arg-type]

    def hosted() -> list[HostedPartition]:
        return [HostedPartition(p.topic, p.index, str(p.topic_id), p.log, p.leader_epoch,
                                p.is_leader) for p in rm.partitions()]
    rlm = RemoteLogManager(cfg, ME, hosted)
    rm.remote_log = rlm
    return rlm


def lead(rm: ReplicaManager, epoch: int = 0, config: LogConfig = CFG) -> None:
    rm.apply_partition_state("t", 0, TID, PartitionState((ME,), (ME,), ME, epoch, epoch), config)


def produce(rm: ReplicaManager, batches: int, per_batch: int = 10, start: int = 0,
            ts0: int | None = None) -> None:
    async def go() -> None:
        for b in range(batches):
            # ts0: record i gets ts0 + i ms (distinct, increasing timestamps)
            recs = [Record(b"k", b"v%08d" % (start + b * per_batch + i) + b"x" * 100,
                           int(time.time() * 1000) if ts0 is None
                           else ts0 + start + b * per_batch + i) for i in range(per_batch)]
            (r,) = await rm.append_records([("t", 0, memoryview(build_batch(recs)))], 1,
                                           0, 5000)  # type: ignore[arg-type]
            assert r.error == 0
    asyncio.run(go())
    rm.logs.maintenance()
    assert rm.logs.wait_for_flushes(30)


async def round_(rlm: RemoteLogManager) -> None:
    rlm.run_once()
    await rlm.wait_idle()


async def fetch_all(rm: ReplicaManager, offset: int = 0, isolation: FetchIsolation =
                    FetchIsolation.HIGH_WATERMARK) -> tuple[list[bytes], list[int]]:
    values: list[bytes] = []
    errors: list[int] = []
    hw = rm.get_partition("t", 0).log.high_watermark  # type: ignore[union-attr]
    while offset < hw:
        params = FetchParams(0, 0, 50_000, isolation)
        (r,) = await rm.fetch_messages(params, [FetchPartition("t", 0, offset, 50_000, -1)])
        if r.error:
            errors.append(r.error)
            return values, errors
        data = b"".join(bytes(b) for b in r.buffers)
        assert data, f"no data at {offset}"
        for _pos, h in iter_batches(data):
            for rec in decode_records(data[_pos:_pos + h.size]):
                if rec.offset >= offset:
                    values.append(rec.value[:9])
            offset = h.last_offset + 1
    return values, errors


def expected(n: int) -> list[bytes]:
    return [b"v%08d" % i for i in range(n)]


def test_segments_are_copied_local_ones_deleted_and_all_read_back(rm: ReplicaManager,
                                                                   tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 150)  # 1500 records, ~190 KB: about 10 segments
    plog = rm.get_partition("t", 0).log  # type: ignore[union-attr]
    # Before any upload, local retention deletes nothing.
    assert plog.apply_retention() == 0
    rlm = make_rlm(rm, tmp_path / "bucket")

    async def main() -> None:
        await rlm.start()
        try:
            for _ in range(3):
                await round_(rlm)
            m = rlm._states[("t", 0)].manifest
            assert m is not None and len(m.copied) == len(plog.segments) - 1
            assert all(s.state is SegmentState.COPY_SEGMENT_FINISHED for s in m.segments)
            assert plog.tiered_upto == plog.segments[-1].base_offset
            assert plog.apply_retention() > 0
            assert plog.log_start_offset > 0
            assert sum(s.size for s in plog.segments) < 30000 + 20000
            values, errors = await fetch_all(rm)
            assert errors == []
            assert values == expected(1500)
            assert rlm.fetch_bytes > 0
            # ListOffsets: earliest is the remote start, -4 the local one, -5 the last copied.
            iso = FetchIsolation.HIGH_WATERMARK
            assert rm.fetch_offset_for_timestamp("t", 0, EARLIEST_TIMESTAMP, iso)[0] == 0
            assert rm.fetch_offset_for_timestamp("t", 0, EARLIEST_LOCAL_TIMESTAMP, iso)[0] \
                == plog.log_start_offset
            assert rm.fetch_offset_for_timestamp("t", 0, LATEST_TIERED_TIMESTAMP, iso)[0] \
                == plog.tiered_upto - 1
            # What `yak tiered status` would show: nothing left to copy but the active one.
            (st,) = rlm.status()
            assert st["leader"] and st["remote_start"] == 0 and st["lag_segments"] == 0
            assert st["copied_upto"] == plog.tiered_upto and st["remote_segments"] == len(
                m.copied) and st["local_start"] == plog.log_start_offset
            # A warm read is served by the cache: no new store reads.
            before = rlm.reader.bytes_fetched
            values, _ = await fetch_all(rm)
            assert values == expected(1500) and rlm.reader.bytes_fetched == before
        finally:
            await rlm.stop()
    asyncio.run(main())


def test_a_new_leader_carries_on_without_duplicate_uploads(rm: ReplicaManager,
                                                          tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 60)
    store = tmp_path / "bucket"

    async def first() -> int:
        rlm = make_rlm(rm, store)
        await rlm.start()
        await round_(rlm)
        n = len(rlm._states[("t", 0)].manifest.copied)  # type: ignore[union-attr]
        await rlm.stop()
        return n

    n1 = asyncio.run(first())
    assert n1 > 0
    lead(rm, epoch=1)  # a new leadership (here: the same broker, a new epoch)
    produce(rm, 60, start=600)

    async def second() -> None:
        rlm = make_rlm(rm, store)
        await rlm.start()
        await round_(rlm)
        m = rlm._states[("t", 0)].manifest
        assert m is not None and m.leader_epoch == 1
        bases = [s.base_offset for s in m.copied]
        assert len(bases) == len(set(bases)) > n1  # each segment once, more than before
        logs = [k for k, _ in await rlm.store.list(partition_dir("t", str(TID), 0))
                if k.endswith(".log")]
        assert len(logs) == len(bases)  # no orphan objects either
        await rlm.stop()
    asyncio.run(second())


def test_two_leaders_cannot_commit_the_same_manifest_version(rm: ReplicaManager,
                                                             tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 60)
    store = tmp_path / "bucket"

    async def main() -> None:
        a = make_rlm(rm, store)
        b = make_rlm(rm, store)
        await a.start()
        await b.start()
        # Both started (their first rounds raced already); b now holds version 0 as if
        # it had read it before a committed: its commit of version 1 must fail.
        await round_(a)
        await round_(b)
        h = a._tiered()[0]
        st_b = b._states[("t", 0)]
        st_b.manifest = Manifest("t", 0, str(TID))
        with pytest.raises(_Fenced):
            await b._commit(h, st_b, log_start_offset=5)
        latest = await ManifestStore(a.store).load("t", str(TID), 0)
        assert latest.log_start_offset == 0 and latest.broker_id == ME
        assert st_b.manifest.version == latest.version  # b re-read the winner's
        await a.stop()
        await b.stop()
    asyncio.run(main())


def test_unfinished_uploads_are_swept_by_the_next_leader(rm: ReplicaManager,
                                                         tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 60)
    store = tmp_path / "bucket"

    async def main() -> None:
        rlm = make_rlm(rm, store)
        await rlm.start()
        # A leader that dies between its uploads and the FINISHED commit.
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
        m = await ManifestStore(rlm.store).load("t", str(TID), 0)
        assert any(s.state is SegmentState.COPY_SEGMENT_STARTED for s in m.segments)
        await rlm.stop()

        lead(rm, epoch=1)
        new = make_rlm(rm, store)
        await new.start()
        await round_(new)
        m = new._states[("t", 0)].manifest
        assert m is not None and m.segments
        assert all(s.state is SegmentState.COPY_SEGMENT_FINISHED for s in m.segments)
        keys = {k for k, _ in await new.store.list(partition_dir("t", str(TID), 0))}
        named = {s.object_key(partition_dir("t", str(TID), 0), k) for s in m.segments
                 for k in s.files}
        assert {k for k in keys if "/manifest/" not in k} == named
        await new.stop()
    asyncio.run(main())


def test_remote_retention_deletes_segments_and_advances_the_start(rm: ReplicaManager,
                                                                  tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 150)
    rlm = make_rlm(rm, tmp_path / "bucket")
    plog = rm.get_partition("t", 0).log  # type: ignore[union-attr]

    async def main() -> None:
        await rlm.start()
        await round_(rlm)
        plog.apply_retention()
        assert rm.fetch_offset_for_timestamp(
            "t", 0, EARLIEST_TIMESTAMP, FetchIsolation.HIGH_WATERMARK)[0] == 0
        rm.update_config("t", LogConfig.from_props(
            {"retention.bytes": "100000", "local.retention.bytes": "30000"}, base=CFG))
        await round_(rlm)
        m = rlm._states[("t", 0)].manifest
        assert m is not None and m.log_start_offset > 0
        start = rm.fetch_offset_for_timestamp("t", 0, EARLIEST_TIMESTAMP,
                                              FetchIsolation.HIGH_WATERMARK)[0]
        assert start == m.start_offset > 0
        assert rlm.segments_deleted > 0
        assert sum(s.size for s in m.copied) + sum(s.size for s in plog.segments
                                                   if s.base_offset >= m.copied_upto) \
            >= 100000 - 25000
        # Below the start: out of range, from the start: everything after it.
        params = FetchParams(0, 0, 50_000, FetchIsolation.HIGH_WATERMARK)
        (r,) = await rm.fetch_messages(params, [FetchPartition("t", 0, 0, 50_000, -1)])
        assert r.error == ErrorCode.offset_out_of_range and r.log_start_offset == start
        values, errors = await fetch_all(rm, start)
        assert errors == [] and values == expected(1500)[start:]
        await rlm.stop()
    asyncio.run(main())


def test_a_corrupt_remote_object_is_refused_never_served(rm: ReplicaManager,
                                                        tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 150)
    store = tmp_path / "bucket"
    rlm = make_rlm(rm, store)
    plog = rm.get_partition("t", 0).log  # type: ignore[union-attr]

    async def main() -> None:
        await rlm.start()
        await round_(rlm)
        plog.apply_retention()
        m = rlm._states[("t", 0)].manifest
        assert m is not None
        first = min(m.copied, key=lambda s: s.base_offset)
        path = store / first.object_key(partition_dir("t", str(TID), 0), "log")
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # a flipped bit inside a batch
        path.write_bytes(bytes(data))
        values, errors = await fetch_all(rm)
        assert errors == [ErrorCode.kafka_storage_error]
        assert values == expected(len(values))  # what came before the bad batch is right
        assert rlm.fetch_errors == 1
        os.remove(store / first.object_key(partition_dir("t", str(TID), 0), "index"))
        rlm.cache.drop_prefix("")
        _values, errors = await fetch_all(rm)
        assert errors == [ErrorCode.kafka_storage_error]  # a missing object likewise
        await rlm.stop()
    asyncio.run(main())


def test_compacted_topics_cannot_be_tiered() -> None:
    with pytest.raises(InvalidConfigurationError, match="cleanup.policy"):
        LogConfig.from_props({"remote.storage.enable": "true", "cleanup.policy": "compact"})
    with pytest.raises(InvalidConfigurationError, match="local.retention.bytes"):
        LogConfig.from_props({"retention.bytes": "100", "local.retention.bytes": "200"})


def test_list_offsets_by_time_finds_records_older_than_the_local_log(rm: ReplicaManager,
                                                                     tmp_path: Path) -> None:
    lead(rm)
    ts0 = int(time.time() * 1000) - 3_600_000
    produce(rm, 150, ts0=ts0)
    rlm = make_rlm(rm, tmp_path / "bucket")
    plog = rm.get_partition("t", 0).log  # type: ignore[union-attr]

    async def main() -> None:
        await rlm.start()
        await round_(rlm)
        plog.apply_retention()
        assert plog.log_start_offset > 300
        iso = FetchIsolation.HIGH_WATERMARK
        for target in (0, 1, 123, 299, plog.log_start_offset + 5):
            local = rm.fetch_offset_for_timestamp("t", 0, ts0 + target, iso)
            got = await rm.remote_offset_for_timestamp("t", 0, ts0 + target, local)
            assert got[:2] == (target, ts0 + target), target
            assert got[2] == 0  # the leader epoch of that record
        await rlm.stop()
    asyncio.run(main())


def test_delete_records_moves_the_whole_logs_start(rm: ReplicaManager, tmp_path: Path) -> None:
    lead(rm)
    produce(rm, 150)
    rlm = make_rlm(rm, tmp_path / "bucket")
    plog = rm.get_partition("t", 0).log  # type: ignore[union-attr]

    async def main() -> None:
        await rlm.start()
        await round_(rlm)
        plog.apply_retention()
        local_start = plog.log_start_offset
        assert local_start > 500
        # Deleting records that are only remote: refused to readers at once.
        assert rm.delete_records("t", 0, 420) == 420
        iso = FetchIsolation.HIGH_WATERMARK
        assert rm.fetch_offset_for_timestamp("t", 0, EARLIEST_TIMESTAMP, iso)[0] == 420
        params = FetchParams(0, 0, 50_000, FetchIsolation.HIGH_WATERMARK)
        (r,) = await rm.fetch_messages(params, [FetchPartition("t", 0, 300, 50_000, -1)])
        assert r.error == ErrorCode.offset_out_of_range and r.log_start_offset == 420
        values, errors = await fetch_all(rm, 420)
        assert errors == [] and values == expected(1500)[420:]
        # A local fetch reports the whole log's start too.
        (r,) = await rm.fetch_messages(params, [FetchPartition("t", 0, local_start, 50_000, -1)])
        assert r.error == 0 and r.log_start_offset == 420
        # The next round commits it and deletes the segments wholly below it.
        await rlm.wait_idle()
        await round_(rlm)
        m = await ManifestStore(rlm.store).load("t", str(TID), 0)
        assert m.log_start_offset == 420
        assert all(s.end_offset >= 420 for s in m.segments)
        assert plog.log_start_offset == local_start  # local data untouched
        await rlm.stop()
    asyncio.run(main())


def test_a_lost_start_truncation_of_the_epoch_checkpoint_is_cut_again_at_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local retention moves a tiered log's start several times a second; the leader-epoch
    checkpoint it rewrites is not fsynced under the log lock that appends wait for (Kafka's
    truncateFromStartAsyncFlush; docs/benchmarks/tiered.md). A crash that loses that write
    leaves epochs below the log start in the file: loading the log cuts them again."""
    from yak.storage import checkpoint

    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    plog = logs.create("t", 0, CFG)
    for epoch in range(3):
        for _ in range(20):
            recs = [Record(b"k", b"v" * 100, int(time.time() * 1000)) for _ in range(10)]
            plog.append_as_leader(memoryview(build_batch(recs)), epoch)
    plog.update_high_watermark()
    path = os.path.join(plog.directory, checkpoint.LEADER_EPOCH_FILE)
    plog.flush()
    assert checkpoint.read_epochs(path) == [(0, 0), (1, 200), (2, 400)]
    stale = Path(path).read_bytes()

    syncs: list[object] = []
    real = checkpoint.write_atomic

    def counting(p: str, data: bytes, sync: bool = True) -> None:
        if sync:
            syncs.append(p)
        real(p, data, sync=sync)
    monkeypatch.setattr(checkpoint, "write_atomic", counting)
    start = plog.delete_records(300)
    assert start == 300 and plog.leader_epoch_cache.entries == [(1, 300), (2, 400)]
    assert path not in syncs  # written, not fsynced, under the log lock
    monkeypatch.undo()

    Path(path).write_bytes(stale)  # the crash lost the lazy write
    logs.shutdown()
    assert checkpoint.read_epochs(path) == [(1, 300), (2, 400)]  # a clean close syncs it
    Path(path).write_bytes(stale)
    reopened = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    reopened.startup()
    try:
        again = reopened.get("t", 0)
        assert again is not None and again.log_start_offset == 300
        assert again.leader_epoch_cache.entries == [(1, 300), (2, 400)]
    finally:
        reopened.shutdown()
