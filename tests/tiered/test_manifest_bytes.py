"""A manifest's bytes are built from each entry's cached JSON (`RemoteLogSegmentMetadata.
encoded`) instead of one `json.dumps` of the whole remote log, which held the GIL ~30 ms
at 1,000 segments in the thread that encoded it (docs/tiered.md, "Producer latency while
uploading"). The bytes must stay exactly what readers of earlier manifests got (Spark's
direct read, `yak tiered status`, an older broker), and a new version must not encode the
entries it carries over."""

from __future__ import annotations

import json
from dataclasses import replace

from yak.tiered.metadata import Manifest, RemoteLogSegmentMetadata, SegmentState


def entry(i: int, state: SegmentState = SegmentState.COPY_SEGMENT_FINISHED
          ) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        f"id{i}", i * 100, i * 100 + 99, 1_700_000_000_000 + i, 4096 + i, [(3, i * 100)],
        state, {"log": (4096 + i, 0), "index": (80, 12345 + i), "txnindex": (40, 7)},
        broker_id=2, event_ms=1_700_000_000_500 + i)


def one_dumps(m: Manifest) -> bytes:
    """The format as first written: the whole manifest in one `json.dumps`."""
    return json.dumps({
        "format": 1, "topic": m.topic, "partition": m.partition, "topic_id": m.topic_id,
        "version": m.version, "leader_epoch": m.leader_epoch, "broker_id": m.broker_id,
        "log_start_offset": m.log_start_offset,
        "segments": [{"segment_id": s.segment_id, "base_offset": s.base_offset,
                      "end_offset": s.end_offset, "max_timestamp": s.max_timestamp,
                      "size": s.size, "leader_epochs": [list(e) for e in s.leader_epochs],
                      "state": s.state.value, "files": {k: list(v) for k, v in s.files.items()},
                      "broker_id": s.broker_id, "event_ms": s.event_ms}
                     for s in m.segments]}, separators=(",", ":")).encode()


def test_bytes_are_the_format_readers_know() -> None:
    for n in (0, 1, 3):
        m = Manifest("t.x-1", 4, "tid", version=7, leader_epoch=3, broker_id=2,
                     log_start_offset=50, segments=tuple(entry(i) for i in range(n)))
        assert m.to_bytes() == one_dumps(m)
        assert Manifest.from_bytes(m.to_bytes()) == m


def test_a_new_version_encodes_only_its_new_entries() -> None:
    m = Manifest("t", 0, "tid", version=1, segments=tuple(entry(i) for i in range(50)))
    m.to_bytes()
    kept = m.segments
    changed = kept[-1].with_state(SegmentState.DELETE_SEGMENT_STARTED, 99)
    added = entry(50, SegmentState.COPY_SEGMENT_STARTED)
    m2 = replace(m, version=2, segments=kept[:-1] + (changed, added))
    assert all("encoded" in s.__dict__ for s in kept)  # cached by version 1
    assert "encoded" not in changed.__dict__ and "encoded" not in added.__dict__
    assert m2.to_bytes() == one_dumps(m2)
    back = Manifest.from_bytes(m2.to_bytes())
    assert back.segments[-2].state is SegmentState.DELETE_SEGMENT_STARTED
    assert back == m2
