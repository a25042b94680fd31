"""Appends and reads (one thread, as the broker's event loop), maintenance and the cleaner in
other threads, on a compact,delete topic: no errors, and every read returns consistent data."""

from __future__ import annotations

import random
import threading
import time

from yak.protocol.records import Record, build_batch, decode_records, iter_batches
from yak.storage import LogConfig, LogManager
from yak.storage.cleaner import clean_log


def test_appends_reads_maintenance_and_cleaner_together(tmp_path):
    cfg = LogConfig(segment_bytes=4096, cleanup_policy="compact,delete",
                    retention_bytes=10_000, min_cleanable_dirty_ratio=0.0,
                    file_delete_delay_ms=200)
    m = LogManager(str(tmp_path), cfg, start_cleaner=False)
    m.startup()
    log = m.create("__consumer_offsets", 0)
    values: dict[int, tuple[bytes, bytes]] = {}
    stop = threading.Event()
    errors: list[BaseException] = []
    cleaned = [0]

    def background():
        try:
            while not stop.is_set():
                m.maintenance()
                if clean_log(log, int(time.time() * 1000), force=True) is not None:
                    cleaned[0] += 1
        except BaseException as e:  # surfaced below
            errors.append(e)

    t = threading.Thread(target=background)
    t.start()
    rng = random.Random(1)
    reads = 0
    try:
        # At least 3 s of appends and reads, and on until both the cleaner and retention
        # have run under them (bounded: a loaded machine may need longer). 500 keys keep the
        # compacted log above retention.bytes, so retention has something to delete however
        # fast the cleaner keeps up (with 20 keys a quick cleaner kept it below, and
        # retention never ran: a CI failure of 2026-11-26).
        start_at = time.monotonic()
        i = 0
        while True:
            elapsed = time.monotonic() - start_at
            if elapsed >= 30 or (elapsed >= 3 and cleaned[0] > 0 and log.log_start_offset > 0):
                break
            recs = [Record(b"g%d" % rng.randrange(500), b"%d" % (i + j) * 10) for j in range(3)]
            r = log.append_as_leader(build_batch(recs), 0)
            for j, rec in enumerate(recs):
                values[r.base_offset + j] = (rec.key, rec.value)
            i += 3
            log.update_high_watermark()
            for _ in range(3):
                start = log.log_start_offset
                off = rng.randrange(start, log.log_end_offset + 1)
                try:
                    data = log.read(off, 8192).to_bytes()
                except Exception as e:  # only out-of-range after a concurrent retention
                    assert type(e).__name__ == "OffsetOutOfRangeError", e
                    continue
                for p, h in iter_batches(data):
                    for rec in decode_records(data[p : p + h.size]):
                        assert values[rec.offset] == (rec.key, rec.value)
                reads += 1
    finally:
        stop.set()
        t.join()
        final_start = log.log_start_offset
        m.shutdown()
    assert not errors, errors
    assert reads > 100
    assert cleaned[0] > 0, "the cleaner ran concurrently"
    assert final_start > 0, "retention ran concurrently"
