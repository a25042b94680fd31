"""Storage side of transactions: markers, the last stable offset, `.txnindex` (Kafka's
34-byte entries) through appends, reads, rolls, recovery, truncation, retention and the
cleaner."""

from __future__ import annotations

import os
import struct
import time

import pytest

from yak.errors import InvalidProducerEpochError, TransactionCoordinatorFencedError
from yak.protocol.records import Record, build_batch, decode_records, iter_batches
from yak.storage import LogConfig
from yak.storage.cleaner import clean_log
from yak.storage.txn_index import AbortedTxn


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes], key: bytes | None = b"k",
              ts: int | None = None) -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    return build_batch([Record(key, v, now) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=True)


def plain(values: list[bytes], key: bytes | None = b"k") -> bytes:
    now = int(time.time() * 1000)
    return build_batch([Record(key, v, now) for v in values])


def txnindex_files(log) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(log.directory)):
        if name.endswith(".txnindex"):
            with open(os.path.join(log.directory, name), "rb") as f:
                out[name] = f.read()
    return out


def test_open_transaction_pins_the_lso_until_its_marker(manager):
    log = manager().create("t", 0)
    log.append_as_leader(plain([b"a", b"b"]), 0)  # 0-1
    log.append_as_leader(txn_batch(7, 0, 0, [b"x", b"y"]), 0)  # 2-3
    log.append_as_leader(plain([b"c"]), 0)  # 4
    log.update_high_watermark()
    assert log.last_stable_offset == 2
    r = log.append_txn_marker(7, 0, 3, commit=True, leader_epoch=0)
    assert (r.base_offset, r.last_offset) == (5, 5)
    log.update_high_watermark()
    assert log.last_stable_offset == 6 == log.high_watermark
    assert txnindex_files(log) == {}  # commits leave no index entry
    # the marker is Kafka's control batch: attributes 0x30, one COMMIT record
    data = log.read(5, 1 << 20).to_bytes()
    ((pos, h),) = list(iter_batches(data))
    assert h.attributes & 0x30 == 0x30 and h.producer_id == 7 and h.base_sequence == -1
    (rec,) = decode_records(data[pos: pos + h.size])
    assert rec.key == struct.pack(">hh", 0, 1) and rec.value == struct.pack(">hi", 0, 3)


def test_abort_writes_a_34_byte_entry_with_kafkas_fields(manager):
    log = manager().create("t", 0)
    log.append_as_leader(txn_batch(1, 0, 0, [b"a"]), 0)  # 0
    log.append_as_leader(txn_batch(2, 0, 0, [b"b"]), 0)  # 1
    log.append_as_leader(txn_batch(1, 0, 1, [b"c"]), 0)  # 2
    log.update_high_watermark()
    assert log.last_stable_offset == 0
    log.append_txn_marker(1, 0, 0, commit=False, leader_epoch=0)  # 3: pid 2 still open at 1
    log.update_high_watermark()
    assert log.last_stable_offset == 1
    log.append_txn_marker(2, 0, 0, commit=False, leader_epoch=0)  # 4
    log.update_high_watermark()
    assert log.last_stable_offset == 5
    log.flush()
    ((_name, raw),) = txnindex_files(log).items()
    assert len(raw) == 68
    assert struct.unpack(">hqqqq", raw[:34]) == (0, 1, 0, 3, 1)
    assert struct.unpack(">hqqqq", raw[34:]) == (0, 2, 1, 4, 5)
    assert log.collect_aborted_txns(0, 5) == [AbortedTxn(1, 0, 3, 1), AbortedTxn(2, 1, 4, 5)]
    assert log.collect_aborted_txns(4, 5) == [AbortedTxn(1, 0, 3, 1), AbortedTxn(2, 1, 4, 5)][1:]
    assert log.collect_aborted_txns(0, 1) == [AbortedTxn(1, 0, 3, 1)]


def test_aborted_transactions_are_found_across_segments(manager):
    log = manager(LogConfig(segment_bytes=400)).create("t", 0)
    log.append_as_leader(txn_batch(9, 0, 0, [b"x" * 50]), 0)  # 0, first segment
    for i in range(12):  # plenty of other data: several rolls
        log.append_as_leader(plain([b"p%d" % i * 20]), 0)
    marker = log.append_txn_marker(9, 0, 0, commit=False, leader_epoch=0).base_offset
    log.update_high_watermark()
    assert len(log.segments) > 2
    assert log.segments[0].base_offset == 0 and log.segments[-1].base_offset <= marker
    # a fetch of the first batch only (upper bound 1) must still learn the abort, whose
    # entry lives in the marker's segment
    assert log.collect_aborted_txns(0, 1) == [AbortedTxn(9, 0, marker, marker + 1)]
    assert log.collect_aborted_txns(marker + 1, marker + 1) == []
    rr = log.read(0, 60)
    assert rr.first_offset == 0 and rr.next_offset == 1


def test_marker_fencing(manager):
    log = manager().create("t", 0)
    log.append_as_leader(txn_batch(3, 2, 0, [b"a"]), 0)
    log.append_txn_marker(3, 2, 5, commit=True, leader_epoch=0)
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.append_txn_marker(3, 1, 5, commit=False, leader_epoch=0)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_txn_marker(3, 2, 4, commit=False, leader_epoch=0)
    assert log.log_end_offset == end  # nothing written


def test_fenced_abort_with_bumped_epoch_ends_the_old_epochs_transaction(manager):
    log = manager().create("t", 0)
    log.append_as_leader(txn_batch(4, 0, 0, [b"zombie"]), 0)
    log.update_high_watermark()
    assert log.last_stable_offset == 0
    log.append_txn_marker(4, 1, 0, commit=False, leader_epoch=0)  # coordinator fenced epoch 0
    log.update_high_watermark()
    assert log.last_stable_offset == log.high_watermark == 2
    assert log.collect_aborted_txns(0, 2) == [AbortedTxn(4, 0, 1, 2)]
    with pytest.raises(InvalidProducerEpochError):  # the zombie is refused from now on
        log.append_as_leader(txn_batch(4, 0, 1, [b"late"]), 0)


def test_unclean_recovery_rebuilds_the_index_and_open_transactions(manager, tmp_path):
    cfg = LogConfig(segment_bytes=300)
    m = manager(cfg)
    log = m.create("t", 0)
    log.append_as_leader(txn_batch(1, 0, 0, [b"a" * 40]), 0)
    for i in range(6):
        log.append_as_leader(plain([b"%d" % i * 40]), 0)
    log.append_txn_marker(1, 0, 0, commit=False, leader_epoch=0)
    log.append_as_leader(txn_batch(2, 0, 0, [b"open" * 10]), 0)  # left open by the "crash"
    open_first = log.log_end_offset - 1
    log.update_high_watermark()
    expected = log.collect_aborted_txns(0, log.log_end_offset)
    assert len(expected) == 1
    log.flush()
    m.crash()
    # wipe every .txnindex: recovery from the start must rebuild them
    for name in os.listdir(log.directory):
        if name.endswith(".txnindex") or name.endswith(".snapshot"):
            os.remove(os.path.join(log.directory, name))
    import yak.storage.log as storage_log
    log2 = storage_log.PartitionLog(log.directory, "t", 0, cfg, recovery_point=0,
                                    high_watermark=log.log_end_offset, clean=False)
    assert log2.collect_aborted_txns(0, log2.log_end_offset) == expected
    assert log2.producer_state.first_unstable_offset() == open_first
    log2.flush()
    assert txnindex_files(log2)
    log2.close()


def test_clean_restart_keeps_the_index(manager):
    m = manager()
    log = m.create("t", 0)
    log.append_as_leader(txn_batch(1, 0, 0, [b"a"]), 0)
    log.append_txn_marker(1, 0, 0, commit=False, leader_epoch=0)
    log.append_as_leader(txn_batch(5, 0, 0, [b"open"]), 0)
    log.update_high_watermark()
    m.shutdown()
    m2 = manager()
    log2 = m2.get("t", 0)
    assert log2.collect_aborted_txns(0, 3) == [AbortedTxn(1, 0, 1, 2)]
    log2.update_high_watermark()
    assert log2.last_stable_offset == 2


def test_truncation_drops_entries_and_retention_deletes_the_file(manager):
    cfg = LogConfig(segment_bytes=200, retention_bytes=1)
    log = manager(cfg).create("t", 0)
    log.append_as_leader(txn_batch(1, 0, 0, [b"a" * 30]), 0)
    log.append_txn_marker(1, 0, 0, commit=False, leader_epoch=0)  # 1
    log.append_as_leader(txn_batch(1, 0, 1, [b"b" * 30]), 0)  # 2
    log.append_txn_marker(1, 0, 0, commit=False, leader_epoch=0)  # 3
    log.update_high_watermark()
    assert [e.last_offset for e in log.aborted_txns()] == [1, 3]
    log.truncate_to(3)
    assert [e.last_offset for e in log.aborted_txns()] == [1]
    assert log.producer_state.first_unstable_offset() == 2  # the second txn is open again
    log.append_txn_marker(1, 0, 0, commit=True, leader_epoch=0)
    for i in range(10):
        log.append_as_leader(plain([b"%d" % i * 60]), 0)
    log.update_high_watermark()
    log.flush()
    first_seg = log.segments[0]
    assert os.path.exists(first_seg.txn_index.path)
    assert log.apply_retention() > 0
    log.delete_retired(force=True)
    assert not os.path.exists(first_seg.txn_index.path)
    assert log.aborted_txns() == []


def compacted_records(log) -> list:
    """(header, records) of every batch, segment after segment."""
    out = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        data = log.read(off, 10**7, max_offset=log.log_end_offset).to_bytes()
        nxt = off
        for p, h in iter_batches(data):
            out.append((h, decode_records(data[p: p + h.size])))
            nxt = h.next_offset
        if nxt == off:
            break
        off = nxt
    return out


def test_cleaner_removes_aborted_data_and_keeps_markers_while_needed(manager):
    cfg = LogConfig(segment_bytes=250, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01,
                    delete_retention_ms=86_400_000)
    log = manager(cfg).create("t", 0)
    log.append_as_leader(plain([b"v0"], key=b"k1"), 0)  # 0
    log.append_as_leader(txn_batch(1, 0, 0, [b"aborted"], key=b"k1"), 0)  # 1
    log.append_txn_marker(1, 0, 0, commit=False, leader_epoch=0)  # 2
    log.append_as_leader(txn_batch(2, 0, 0, [b"committed"], key=b"k2"), 0)  # 3
    log.append_txn_marker(2, 0, 0, commit=True, leader_epoch=0)  # 4
    for i in range(8):
        log.append_as_leader(plain([b"filler" * 5], key=b"f%d" % i), 0)
    log.update_high_watermark()
    now = int(time.time() * 1000)
    assert clean_log(log, now, force=True) is not None
    recs = compacted_records(log)
    values = {(r.key, r.value) for h, rs in recs if not h.is_control for r in rs}
    assert (b"k1", b"v0") in values  # the aborted write did not shadow the committed one
    assert (b"k1", b"aborted") not in values
    assert (b"k2", b"committed") in values
    markers = [h.base_offset for h, _ in recs if h.is_control]
    assert markers == [2, 4]  # within delete.retention.ms both stay
    assert log.collect_aborted_txns(0, 5) == [AbortedTxn(1, 1, 2, 3)]
    # later, past delete.retention.ms: the abort marker has no data left and goes; the commit
    # marker stays while its transaction's record does
    later = now + cfg.delete_retention_ms + 60_000
    for i in range(8):  # new dirty data: the next cleaning round (as in Kafka)
        log.append_as_leader(plain([b"filler" * 5], key=b"h%d" % i), 0)
    log.update_high_watermark()
    assert clean_log(log, later, force=True) is not None
    recs = compacted_records(log)
    assert [h.base_offset for h, _ in recs if h.is_control] == [4]
    assert log.aborted_txns() == []
    # once k2 is overwritten and compacted away, the commit marker goes too
    log.append_as_leader(plain([b"new"], key=b"k2"), 0)
    for i in range(8):
        log.append_as_leader(plain([b"filler" * 5], key=b"g%d" % i), 0)
    log.update_high_watermark()
    assert clean_log(log, later, force=True) is not None  # drops the old k2 record...
    for i in range(8):
        log.append_as_leader(plain([b"filler" * 5], key=b"j%d" % i), 0)
    log.update_high_watermark()
    assert clean_log(log, later, force=True) is not None  # ...and the next round its marker
    recs = compacted_records(log)
    assert [h.base_offset for h, _ in recs if h.is_control] == []


def test_cleaner_stops_at_the_first_open_transaction(manager):
    cfg = LogConfig(segment_bytes=200, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    log = manager(cfg).create("t", 0)
    log.append_as_leader(plain([b"old"], key=b"k"), 0)
    log.append_as_leader(txn_batch(1, 0, 0, [b"open"], key=b"other"), 0)  # 1, stays open
    for _ in range(10):
        log.append_as_leader(plain([b"x" * 30], key=b"k"), 0)
    log.update_high_watermark()
    assert log.last_stable_offset == 1
    clean_log(log, int(time.time() * 1000), force=True)
    recs = compacted_records(log)
    assert any(r.value == b"old" for _h, rs in recs for r in rs)  # nothing above the LSO
