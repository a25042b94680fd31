"""The log's parts on their own (issue 22): the retention decision and the validator are
pure, and no part imports the facade (`yak.storage.log`), so the arrows run one way."""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import yak.storage
from yak.errors import CorruptRecordError, InvalidRecordError
from yak.protocol.records import parse_header
from yak.storage import LogConfig
from yak.storage.retention import segments_to_delete
from yak.storage.validator import validate_batches

from .conftest import make_batch

PARTS = ("local_log", "loader", "validator", "retention")


@dataclass
class _Seg:  # what the retention decision reads of a segment
    base_offset: int
    size: int
    largest_timestamp: int


def _segs(*spec: tuple[int, int, int]) -> list[_Seg]:
    return [_Seg(*s) for s in spec]


def test_no_part_imports_the_facade() -> None:
    root = Path(yak.storage.__file__).parent
    for part in PARTS:
        tree = ast.parse((root / f"{part}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "yak.storage.log", part
            elif isinstance(node, ast.Import):
                assert all(a.name != "yak.storage.log" for a in node.names), part


def test_retention_by_time_stops_at_a_recent_segment_and_at_the_high_watermark() -> None:
    now = 1_000_000
    cfg = LogConfig(retention_ms=1000, retention_bytes=-1)
    segs = _segs((0, 10, now - 5000), (10, 10, now - 5000), (20, 10, now - 10), (30, 10, 0))
    assert segments_to_delete(segs, 40, 40, cfg, now) == 2
    assert segments_to_delete(segs, 40, 15, cfg, now) == 1  # the second reaches past the HW


def test_retention_by_time_covers_an_expired_active_segment() -> None:
    now = 1_000_000
    cfg = LogConfig(retention_ms=1000, retention_bytes=-1)
    segs = _segs((0, 10, now - 5000), (10, 10, now - 5000))
    assert segments_to_delete(segs, 20, 20, cfg, now) == len(segs)  # the caller rolls first
    assert segments_to_delete(segs, 20, 19, cfg, now) == 1


def test_retention_by_size_never_takes_the_active_segment() -> None:
    cfg = LogConfig(retention_ms=-1, retention_bytes=15)
    segs = _segs((0, 10, 0), (10, 10, 0), (20, 10, 0))
    assert segments_to_delete(segs, 30, 30, cfg, 0) == 1  # 20 bytes left >= 15, 10 would not be
    cfg = LogConfig(retention_ms=-1, retention_bytes=0)
    assert segments_to_delete(segs, 30, 30, cfg, 0) == 2


def test_validator_returns_each_header_and_checks_before_writing() -> None:
    now = int(time.time() * 1000)
    data = make_batch(2, ts=now) + make_batch(3, ts=now)
    first = parse_header(data)
    headers = validate_batches(memoryview(data), LogConfig(), False, True, now, first, "t", 0)
    assert [h.record_count for h in headers] == [2, 3]
    assert headers[0] is first  # the caller's parse is reused, not repeated
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        validate_batches(memoryview(bad), LogConfig(), False, True, now, None, "t", 0)
    with pytest.raises(InvalidRecordError) as e:
        keyless = make_batch(2, key=None, ts=now)
        validate_batches(memoryview(keyless), LogConfig(), True, True, now, None, "t", 0)
    assert [i for i, _ in e.value.record_errors] == [0, 1]
