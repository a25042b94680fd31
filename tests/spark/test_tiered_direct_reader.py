"""The direct reader of tiered segments without Spark: real logs, the real remote log
manager copying them to a real `file://` store, then `tiered_plan.clip` and
`tiered_read.read_splits` as a Spark task runs them, in seconds. What Spark adds (the
source, SeaweedFS, the brokers for the tail) is tests/spark/test_tiered_direct.py.

- every remote offset read back, in order, over the whole remote log and over a range
  that starts and ends inside segments, one task reading several segments in turn;
- a segment object deleted: DataLossError naming it, or its offsets skipped;
- a flipped byte in a segment: a CRC error, never rows, failOnDataLoss or not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tiered.test_remote_log import lead, make_rlm, produce, round_
from yak.partition import ReplicaManager
from yak.spark.offsets import DataLossError, OffsetRange
from yak.spark.options import TieredSettings
from yak.spark.tiered_plan import clip, group
from yak.spark.tiered_read import RemoteSplit, read_splits
from yak.storage import LogConfig, LogManager
from yak.tiered import Manifest, ManifestStore, RemoteStore, parse_uri
from yak.tiered.reader import RemoteCorruptionError

N = 1500  # records, 10 per batch, ~190 KB: about 10 segments of 20 KB


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[Manifest, TieredSettings, int]]:
    """(newest manifest, settings for the store, end of the remote log)."""
    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    rm = ReplicaManager(1, logs)
    try:
        lead(rm)
        produce(rm, N // 10)
        rlm = make_rlm(rm, tmp_path / "bucket")

        async def copy() -> Manifest:
            await rlm.start()
            try:
                for _ in range(3):
                    await round_(rlm)
            finally:
                await rlm.stop()
            part = rm.get_partition("t", 0)
            assert part is not None
            store = RemoteStore(parse_uri(f"file://{tmp_path / 'bucket'}"))
            return await ManifestStore(store).load("t", str(part.topic_id), 0)
        m = asyncio.run(copy())
        assert len(m.copied) >= 5 and m.start_offset == 0
        yield m, TieredSettings(f"file://{tmp_path / 'bucket'}"), m.copied_upto
    finally:
        rm.io_pool.shutdown(wait=True)
        logs.shutdown()


def values(settings: TieredSettings, splits: list[RemoteSplit],
           fail_on_data_loss: bool = True) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    for rb in read_splits(settings, tuple(splits), include_headers=False,
                          fail_on_data_loss=fail_on_data_loss, read_committed=False):
        d = rb.to_pydict()
        out += [(o, v[:9]) for o, v in zip(d["offset"], d["value"], strict=True)]
    return out


def test_the_remote_log_read_straight_from_the_store(remote) -> None:
    m, settings, end = remote
    splits, rest = clip(m, OffsetRange("t", 0, 0, N))
    assert rest == [OffsetRange("t", 0, end, N)]  # the local tail: the brokers' part
    assert [s.start for s in splits] == sorted(s.base_offset for s in m.copied)
    (task,) = group(splits, None)  # one task per topic-partition
    assert values(settings, list(task)) == [(i, b"v%08d" % i) for i in range(end)]

    lo, hi = 37, end - 55  # inside the first and the last segment
    splits, rest = clip(m, OffsetRange("t", 0, lo, hi))
    assert rest == [] and splits[0].start == lo and splits[-1].end == hi
    assert values(settings, splits) == [(i, b"v%08d" % i) for i in range(lo, hi)]
    assert len(group(splits, 4)) == 4  # minPartitions: runs of whole segments


def test_a_deleted_segment_follows_fail_on_data_loss(remote, tmp_path: Path) -> None:
    m, settings, end = remote
    splits, _ = clip(m, OffsetRange("t", 0, 0, end))
    gone = splits[2]
    (tmp_path / "bucket" / gone.segment.object_key(gone.part_dir, "log")).unlink()
    with pytest.raises(DataLossError, match=f"remote segment {gone.segment.segment_id}.*is"
                                            f" gone.*offsets {gone.start}..{gone.end - 1}"):
        values(settings, splits)
    got = values(settings, splits, fail_on_data_loss=False)
    assert [o for o, _ in got] == [o for o in range(end) if not gone.start <= o < gone.end]


def test_a_corrupt_segment_is_never_served(remote, tmp_path: Path) -> None:
    m, settings, end = remote
    splits, _ = clip(m, OffsetRange("t", 0, 0, end))
    bad = splits[1]
    path = tmp_path / "bucket" / bad.segment.object_key(bad.part_dir, "log")
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's records
    path.write_bytes(bytes(data))
    for fail in (True, False):
        with pytest.raises(RemoteCorruptionError, match=f"batch {bad.start} fails its CRC32C"):
            values(settings, splits, fail_on_data_loss=fail)


