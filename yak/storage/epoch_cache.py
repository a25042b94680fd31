"""Leader-epoch cache: which leader epoch started at which offset (Kafka's LeaderEpochFileCache).

Replication needs it to answer OffsetsForLeaderEpoch so that a follower truncates exactly the
records a new leader does not have, instead of trusting the high watermark (KIP-101).

A new epoch is recorded on the append path, so its checkpoint is written there without fsync
(as Kafka does since KAFKA-15046): two fsyncs on the event loop per partition's first append
stalled every other client. It becomes durable with the log's next flush, and an unclean
start re-derives the epochs of the batches it recovers from their headers, so nothing the
crash lost is missing from the cache. A truncation from the start (retention, local
retention of a tiered log: several times a second at 10 MB/s) is written without fsync too,
as Kafka's truncateFromStartAsyncFlush: its fsync ran under the log lock that appends on
the event loop wait for, and was the largest share of a tiered topic's producer p99
(docs/benchmarks/tiered.md); a crash that loses it leaves entries below the log start,
which loading cuts again (`yak.storage.loader`). Truncations from the end, which must not
be undone by a crash, still fsync at once.
"""

from __future__ import annotations

import threading

from yak.storage import checkpoint

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._entries: list[tuple[int, int]] = checkpoint.read_epochs(path)
        self._unsynced = False
        # The newest epoch, readable without the lock: the append path compares its epoch
        # with it on every append and only calls `assign` when a new epoch begins.
        self.latest = self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    @property
    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        with self._lock:
            return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (ignored unless it is a new epoch)."""
        if epoch < 0:
            return
        with self._lock:
            if self._entries and self._entries[-1][0] >= epoch:
                return
            # A later epoch may not start before an earlier one ended (after truncation).
            while self._entries and self._entries[-1][1] >= start_offset:
                self._entries.pop()
            self._entries.append((epoch, start_offset))
            self._flush(sync=False)

    def flush(self) -> None:
        """fsync a checkpoint that `assign` wrote lazily (called by the log's flush)."""
        with self._lock:
            if self._unsynced:
                self._flush()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, end offset of that epoch), as OffsetsForLeaderEpoch."""
        with self._lock:
            if not self._entries or epoch < self._entries[0][0]:
                return UNDEFINED_EPOCH, UNDEFINED_OFFSET
            if epoch >= self._entries[-1][0]:
                return self._entries[-1][0], log_end_offset
            found = self._entries[0][0]
            for i, (e, _start) in enumerate(self._entries):
                if e > epoch:
                    return found, self._entries[i][1]
                found = e
            return found, log_end_offset  # unreachable: epoch < last entry's epoch

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after `end_offset` (the log was truncated there)."""
        with self._lock:
            before = len(self._entries)
            self._entries = [(e, o) for e, o in self._entries if o < end_offset]
            if len(self._entries) != before:
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved: the epoch covering it now starts there (written lazily,
        see the module docstring)."""
        with self._lock:
            keep = [(e, o) for e, o in self._entries if o >= start_offset]
            older = [(e, o) for e, o in self._entries if o < start_offset]
            if older:
                keep.insert(0, (older[-1][0], start_offset))
            if keep != self._entries:
                self._entries = keep
                self._flush(sync=False)

    def clear(self) -> None:
        with self._lock:
            self._entries = []
            self._flush()

    def _flush(self, sync: bool = True) -> None:
        """Every change ends here: persist the entries (and refresh `latest`)."""
        self.latest = self._entries[-1][0] if self._entries else UNDEFINED_EPOCH
        checkpoint.write_epochs(self._path, self._entries, sync=sync)
        self._unsynced = not sync
