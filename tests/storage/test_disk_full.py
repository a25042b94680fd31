"""Disk full: a data dir on a small tmpfs. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import os
import subprocess
import tempfile

import pytest

from yak.errors import KafkaStorageError
from yak.protocol.records import Record, build_batch, iter_batches, parse_header
from yak.storage import LogConfig, LogManager


@pytest.fixture
def small_tmpfs():
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d = tempfile.mkdtemp(prefix="yak-full-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", d],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount tmpfs: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", d], check=False)
        os.rmdir(d)


def test_disk_full_then_space_freed(small_tmpfs):
    cfg = LogConfig(segment_bytes=10 * 1024 * 1024)
    data_dir = os.path.join(small_tmpfs, "data")
    ballast = os.path.join(small_tmpfs, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * 1024 * 1024)
    m = LogManager(data_dir, cfg, start_cleaner=False)
    m.startup()
    log = m.create("t", 0)
    acked: list[bytes] = []
    error = None
    for i in range(1000):
        batch = build_batch([Record(b"k", bytes([i % 251]) * 30_000)])
        try:
            r = log.append_as_leader(batch, 0)
        except KafkaStorageError as e:
            error = e
            break
        acked.append(batch)
        assert r.base_offset == i
    assert error is not None, "a 2 MiB tmpfs must fill up"
    assert 0 < len(acked) < 40
    leo = log.log_end_offset
    assert leo == len(acked)
    seg = log.segments[-1]
    # no partial batch: the file ends exactly after the last acknowledged batch
    assert os.path.getsize(seg.log_path) == seg.size
    log.update_high_watermark()

    def values() -> list[bytes]:
        out, off = [], log.log_start_offset
        while off < log.log_end_offset:
            data = log.read(off, 10**7, max_offset=log.log_end_offset).to_bytes()
            for p, h in iter_batches(data):
                out.append(data[p + 61 : p + h.size])
                off = h.next_offset
        return out

    want = [b[61:] for b in acked]
    assert values() == want  # readable while full
    with pytest.raises(KafkaStorageError):  # still full: still an error, still nothing partial
        log.append_as_leader(build_batch([Record(b"k", b"x" * 50_000)]), 0)
    assert log.log_end_offset == leo and os.path.getsize(seg.log_path) == seg.size

    os.remove(ballast)  # space freed: appends work again, at the next offset
    for i in range(5):
        batch = build_batch([Record(b"k", b"after%d" % i)])
        assert log.append_as_leader(batch, 0).base_offset == leo + i
        acked.append(batch)
    want = [b[61:] for b in acked]
    log.update_high_watermark()
    assert values() == want
    m.crash()
    m2 = LogManager(data_dir, cfg, start_cleaner=False)
    m2.startup()
    log = m2.get("t", 0)
    assert log.log_end_offset == leo + 5
    log.update_high_watermark()
    assert values() == want
    m2.shutdown()
    assert parse_header(acked[0]).record_count == 1
