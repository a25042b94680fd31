"""Idempotent- and transactional-producer state of one partition (Kafka's
ProducerStateManager).

For each producer id: its epoch and the metadata of its last 5 batches, so that a retried
batch is recognised (DuplicateSequenceError carries the offsets it got the first time) and a
gap in sequences is refused; for transactional producers also the first offset of the
transaction open in this partition and the epoch of the coordinator that last wrote it a
marker. The open transactions give the last stable offset (the first offset of the oldest
one); a marker ends one (`end_txn`), and an aborted one becomes an entry of the aborted
transaction index. Snapshots (`<offset>.snapshot`, Kafka's v1 format) are taken at segment
roll and clean shutdown, so recovery only re-reads the log after the last snapshot.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass, field

import crc32c

from yak.errors import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from yak.protocol.records import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader
from yak.storage.checkpoint import write_atomic

MAX_BATCHES_PER_PRODUCER = 5
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"

_SNAP_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    timestamp: int  # the LogAppendTime it was given, or -1


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: list[BatchMetadata] = field(default_factory=list)
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker just ended in this partition (Kafka's CompletedTxn), with
    the last stable offset right after it (what its `.txnindex` entry records)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    last_stable_offset: int


class ProducerStateManager:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        # Hook for transactions: first offsets of open transactions -> producer id. The last
        # stable offset is min(first open txn offset, high watermark).
        self.ongoing_txns: dict[int, int] = {}

    # --- checks on the leader ---------------------------------------------------------------

    def check(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        staged: dict[int, tuple[int, int]],
    ) -> None:
        """Raise if the batch is a duplicate, out of order, or from a fenced epoch.

        `staged` holds (epoch, last sequence) of earlier batches of the same append.
        """
        entry = self.producers.get(producer_id)
        if producer_id in staged:
            cur_epoch, cur_last = staged[producer_id]
        elif entry is not None:
            cur_epoch, cur_last = entry.epoch, entry.last_seq
        else:
            # Unknown producer (new, or its state aged out with the log): accept any sequence.
            staged[producer_id] = (epoch, last_seq)
            return
        if epoch < cur_epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than {cur_epoch}"
            )
        if first_seq < 0:
            # No sequence: a coordinator's write on the producer's behalf (TxnOffsetCommit
            # into __consumer_offsets), which Kafka checks for the epoch only.
            staged[producer_id] = (epoch, cur_last)
            return
        if epoch > cur_epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0"
                )
        else:
            if entry is not None and producer_id not in staged:
                for b in entry.batches:
                    if b.first_seq == first_seq and b.last_seq == last_seq:
                        raise DuplicateSequenceError(b.base_offset, b.last_offset, b.timestamp)
            if cur_last >= 0 and first_seq != (cur_last + 1) % (INT32_MAX + 1):
                raise OutOfOrderSequenceError(
                    f"producer {producer_id}: sequence {first_seq} after {cur_last}"
                )
        staged[producer_id] = (epoch, last_seq)

    # --- updates (leader, follower and recovery) --------------------------------------------

    def update(self, h: BatchHeader, base_offset: int, timestamp: int) -> None:
        """Record an appended batch (`base_offset`: where it landed in the log)."""
        pid = h.producer_id
        if pid < 0:
            return
        epoch, base_seq, lod, attrs = (
            h.producer_epoch,
            h.base_sequence,
            h.last_offset_delta,
            h.attributes,
        )
        last_offset = base_offset + lod
        entry = self.producers.get(pid)
        if entry is None:
            entry = ProducerEntry(pid, epoch)
            self.producers[pid] = entry
        elif epoch > entry.epoch:
            # A new epoch starts its sequences over; an open transaction stays open until
            # its marker (a fenced abort's marker carries the bumped epoch).
            entry.epoch = epoch
            entry.batches = []
        if attrs & CONTROL_BIT:  # a marker: the caller ends the transaction (`end_txn`)
            return
        if base_seq >= 0:
            last_seq = (base_seq + lod) % (INT32_MAX + 1)
            entry.batches.append(
                BatchMetadata(base_seq, last_seq, base_offset, last_offset, timestamp)
            )
            if len(entry.batches) > MAX_BATCHES_PER_PRODUCER:
                del entry.batches[0]
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        if attrs & TRANSACTIONAL_BIT and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = base_offset
            self.ongoing_txns[base_offset] = pid

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Refuse a marker from an older producer epoch, or from a coordinator older than
        the last one that wrote this producer a marker here (Kafka's checks)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} at epoch {epoch}, older than {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch},"
                f" older than {entry.coordinator_epoch}"
            )

    def end_txn(
        self, producer_id: int, epoch: int, coordinator_epoch: int, offset: int
    ) -> CompletedTxn | None:
        """A marker at `offset` ends the producer's open transaction here: returns it, with
        the last stable offset after it, or None if none was open (a marker for a
        partition the transaction never wrote to, or a re-sent one)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, epoch)
            self.producers[producer_id] = entry
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches = []
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        entry.current_txn_first_offset = -1
        self.ongoing_txns.pop(first, None)
        others = self.ongoing_txns
        lso = min(others) if others else offset + 1
        return CompletedTxn(producer_id, first, offset, lso)

    def has_ongoing_txn(self, producer_id: int, epoch: int) -> bool:
        """Is a transaction of this producer open here at `epoch` (KIP-890: then its later
        batches need no verification with the coordinator)?"""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0 and entry.epoch == epoch

    def remove_expired(self, now: int, expiration_ms: int) -> int:
        """Forget producers idle longer than `producer.id.expiration.ms` (Kafka: 1 day), so the
        map does not grow forever; one with an open transaction is kept."""
        stale = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0 and now - e.last_timestamp > expiration_ms
        ]
        for pid in stale:
            del self.producers[pid]
        return len(stale)

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing_txns) if self.ongoing_txns else None

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()

    # --- snapshots --------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        out = []
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.directory):
                if name.endswith(SNAPSHOT_SUFFIX):
                    with contextlib.suppress(ValueError):
                        out.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
        return sorted(out)

    def _path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def take_snapshot(self, offset: int) -> None:
        body = bytearray(struct.pack(">i", len(self.producers)))
        for e in self.producers.values():
            last = e.batches[-1] if e.batches else None
            body += _SNAP_ENTRY.pack(
                e.producer_id,
                e.epoch,
                last.last_seq if last else -1,
                last.last_offset if last else -1,
                (last.last_offset - last.base_offset) if last else 0,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
        crc = crc32c.crc32c(bytes(body))
        write_atomic(self._path(offset), struct.pack(">hI", 1, crc) + bytes(body), sync=False)

    def flush_snapshot(self, offset: int) -> None:
        """fsync the snapshot `take_snapshot` wrote without it at a roll (Kafka flushes it
        with the rolled segment, off the append path). The caller fsyncs the directory."""
        try:
            fd = os.open(self._path(offset), os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def load_snapshot(self, max_offset: int) -> int:
        """Load the newest valid snapshot at or below `max_offset`; returns its offset, or -1
        (then the caller replays the whole log)."""
        self.clear()
        for off in reversed(self.snapshot_offsets()):
            if off > max_offset:
                continue
            try:
                with open(self._path(off), "rb") as f:
                    data = f.read()
                version, crc, count = _SNAP_HEADER.unpack_from(data, 0)
                if version != 1 or crc32c.crc32c(data[6:]) != crc:
                    raise ValueError("bad snapshot")
                if len(data) != 10 + count * _SNAP_ENTRY.size:
                    raise ValueError("bad snapshot length")
                for vals in _SNAP_ENTRY.iter_unpack(data[10:]):
                    pid, epoch, last_seq, last_off, delta, ts, coord, txn_first = vals
                    e = ProducerEntry(pid, epoch, [], coord, txn_first, ts)
                    if last_off >= 0:
                        first_seq = (last_seq - delta) % (INT32_MAX + 1)
                        e.batches.append(
                            BatchMetadata(first_seq, last_seq, last_off - delta, last_off, -1)
                        )
                    self.producers[pid] = e
                    if txn_first >= 0:
                        self.ongoing_txns[txn_first] = pid
                return off
            except (OSError, ValueError, struct.error):
                self.clear()
                self.remove_snapshot(off)
        return -1

    def remove_snapshot(self, offset: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._path(offset))

    def delete_snapshots_after(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                self.remove_snapshot(off)

    def delete_snapshots_before(self, offset: int) -> None:
        """Keep the newest snapshot at or below `offset`; older ones are useless."""
        offs = [o for o in self.snapshot_offsets() if o <= offset]
        for off in offs[:-1]:
            self.remove_snapshot(off)
