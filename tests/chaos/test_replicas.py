"""yak.chaos.replicas on real logs: committed bytes are read across segments up to the high
watermark, two copies of the same batches compare identical whatever their segment
boundaries, a differing batch is reported; offset gaps in a history are found."""

from __future__ import annotations

import time
from pathlib import Path

from yak.chaos.replicas import committed_bytes, compare_replicas, offset_gaps
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager


def _write(data_dir: Path, batches: list[bytes], segment_bytes: int) -> None:
    lm = LogManager(str(data_dir), LogConfig(), start_cleaner=False)
    lm.startup()
    log = lm.create("t", 0, LogConfig.from_props({"segment.bytes": str(segment_bytes)}))
    for b in batches:
        log.append_as_follower(b)
    lm.shutdown()


def _batches(values: list[bytes]) -> list[bytes]:
    now = int(time.time() * 1000)
    out = []
    offset = 0
    for v in values:
        out.append(build_batch([Record(b"k", v, now), Record(b"k", v + b"!", now)],
                               base_offset=offset, partition_leader_epoch=1))
        offset += 2
    return out


def test_same_batches_in_different_segments_compare_identical(tmp_path: Path) -> None:
    batches = _batches([b"v%d" % i for i in range(30)])
    _write(tmp_path / "a", batches, 1 << 20)  # one segment
    _write(tmp_path / "b", batches, 400)  # many segments
    assert len(list((tmp_path / "b" / "t-0").glob("*.log"))) > 3
    first, data = committed_bytes(tmp_path / "b", "t", 0, 20)
    assert first == 0 and data == b"".join(batches[:10])
    cmp = compare_replicas({1: tmp_path / "a", 2: tmp_path / "b"}, "t", 0, 60)
    assert cmp.identical, cmp.describe()


def test_a_differing_replica_is_reported(tmp_path: Path) -> None:
    batches = _batches([b"v%d" % i for i in range(10)])
    other = list(batches)
    other[7] = _batches([b"x"] * 8)[7]  # same offsets, other content
    _write(tmp_path / "a", batches, 1 << 20)
    _write(tmp_path / "b", other, 1 << 20)
    assert compare_replicas({1: tmp_path / "a", 2: tmp_path / "b"}, "t", 0, 14).identical
    cmp = compare_replicas({1: tmp_path / "a", 2: tmp_path / "b"}, "t", 0, 20)
    assert not cmp.identical and "DIFFER" in cmp.describe()


def test_offset_gaps() -> None:
    history = [
        {"op": "poll", "process": "final", "records": [["t-0", 0, "a"], ["t-0", 1, "b"],
                                                      ["t-0", 3, "c"]]},
        {"op": "poll", "process": "final", "records": [{"partition": "t-1", "offset": 0,
                                                        "value": "d"}]},
        {"op": "poll", "process": "other", "records": [["t-2", 5, "e"]]},
    ]
    assert offset_gaps(history) == {"t-0": [2]}
    assert offset_gaps(history[1:]) == {}
