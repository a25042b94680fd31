"""A stateful hypothesis test: the partition log against a plain list of records."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from yak.protocol.records import Record, build_batch, decode_records, iter_batches
from yak.storage import LogConfig, LogManager

CFG = LogConfig(segment_bytes=600, index_interval_bytes=100, retention_bytes=-1,
                file_delete_delay_ms=0)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # tmpfs when there is one: the model crashes in-process, so fsyncs only cost time.
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = tempfile.mkdtemp(prefix="yak-stateful-", dir=shm)
        self.mgr = LogManager(self.dir, CFG, start_cleaner=False)
        self.mgr.startup()
        self.log = self.mgr.create("s.t-1", 0)
        self.records: list[tuple[int, bytes, int]] = []  # (offset, value, timestamp)
        self.batches: list[tuple[int, int]] = []  # (base, next) offsets
        self.start = 0
        self.next_value = 0
        self.empty_end = 0  # the log end offset while no batch is left
        self.history: dict[int, tuple[int, bytes, int]] = {}

    def teardown(self) -> None:
        if self.mgr.started:
            self.mgr.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def end(self) -> int:
        return self.batches[-1][1] if self.batches else self.empty_end

    @rule(n=st.integers(1, 5), ts=st.integers(1_000, 1_100), size=st.integers(0, 120))
    def append(self, n, ts, size):
        recs = []
        for _ in range(n):
            self.next_value += 1
            recs.append(Record(b"k", str(self.next_value).encode() * (1 + size // 8), ts))
        r = self.log.append_as_leader(build_batch(recs), 0)
        assert r.base_offset == self.end
        for i, rec in enumerate(recs):
            self.records.append((r.base_offset + i, rec.value, ts))
            self.history[r.base_offset + i] = (r.base_offset + i, rec.value, ts)
        self.batches.append((r.base_offset, r.last_offset + 1))
        self.log.update_high_watermark()

    @rule(data=st.data())
    def read(self, data):
        off = data.draw(st.integers(self.start, self.end))
        max_bytes = data.draw(st.integers(1, 3000))
        r = self.log.read(off, max_bytes, max_offset=self.end)
        if off == self.end:
            assert r.size == 0
            return
        raw = r.to_bytes()
        got = []
        for p, h in iter_batches(raw):
            got += [(x.offset, x.value, x.timestamp) for x in decode_records(raw[p : p + h.size])]
        assert got, "a read below the log end returns at least one batch"
        # whole batches: records below the log start may come along (consumers skip them)
        assert all(self.history[x[0]] == x for x in got)
        visible = [x for x in got if x[0] >= self.start]
        want = [x for x in self.records if x[0] >= visible[0][0]][: len(visible)]
        assert visible == want
        assert got[0][0] <= off <= got[-1][0]

    @rule(ts=st.integers(990, 1_110))
    def by_timestamp(self, ts):
        want = next(((o, t) for o, _v, t in self.records if o >= self.start and t >= ts), None)
        assert self.log.offset_for_timestamp(ts) == want

    @rule()
    def roll(self):
        self.log.roll()

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data):
        off = data.draw(st.integers(self.start, self.end))
        first_base = self.log.segments[0].base_offset
        self.log.truncate_to(off)
        if off >= self.end:
            return
        if off <= first_base or off < self.start:
            self.batches, self.records = [], []  # truncated fully: restarts at `off`
            self.start = off
            self.empty_end = off
            return
        # whole batches go: a batch holding `off` is removed entirely
        keep = [b for b in self.batches if b[1] <= off]
        removed_base = next(b[0] for b in self.batches if b[1] > off)
        self.batches = keep
        self.empty_end = removed_base
        self.records = [x for x in self.records if x[0] < removed_base]
        self.start = min(self.start, self.end)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def delete_records(self, data):
        off = data.draw(st.integers(self.start, self.end))
        self.log.delete_records(off)
        self.mgr.checkpoint()
        self.start = max(self.start, off)
        if not self.batches or off == self.end:
            self.empty_end = max(self.empty_end, off)

    @rule(limit=st.integers(0, 3000))
    def retention(self, limit):
        from dataclasses import replace

        self.log.update_config(replace(CFG, retention_bytes=limit))
        self.log.apply_retention()
        self.log.update_config(CFG)
        new_start = self.log.log_start_offset
        assert new_start >= self.start
        assert new_start == self.start or any(b[0] == new_start for b in self.batches) or (
            new_start == self.end
        )
        self.start = new_start
        self.empty_end = max(self.empty_end, new_start) if not self.batches else self.empty_end
        self.mgr.checkpoint()

    def _reopen(self, clean: bool) -> None:
        bases = [s.base_offset for s in self.log.segments]
        if clean:
            self.mgr.shutdown()
        else:
            self.mgr.crash()
        self.mgr = LogManager(self.dir, CFG, start_cleaner=False)
        self.mgr.startup()
        assert self.mgr.was_clean_shutdown == clean
        self.log = self.mgr.get("s.t-1", 0)
        self.log.update_high_watermark()
        stats = self.log.recovery_stats
        if clean:
            assert stats.scanned == []
        else:
            # Only the segments from the one holding the checkpointed recovery point on.
            first = max((b for b in bases if b <= stats.recovery_point), default=bases[0])
            assert stats.scanned == [b for b in bases if b >= first]

    @rule()
    def close_and_reopen(self):
        self._reopen(True)

    @rule()
    def crash_and_reopen(self):
        self._reopen(False)

    @rule(wait=st.booleans())
    def roll_then_crash(self, wait):
        """Crash right after a roll: before or after its flush reached the disk."""
        rolled = self.log.segments[-1].size > 0
        self.log.roll()
        new_base = self.log.segments[-1].base_offset
        if wait:
            assert self.mgr.wait_for_flushes(10)
            if rolled:
                # The roll's flush moved the recovery point to the new segment and wrote it.
                assert self.log.recovery_point == self.log.segments[-1].base_offset
        self._reopen(False)
        if wait and rolled:
            # Only the new (empty) segment was scanned, and dropped: the log ends where it was.
            assert self.log.recovery_stats.scanned == [new_base]

    @invariant()
    def offsets_match(self):
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == self.start
        self.records = [x for x in self.records if x[0] >= self.start]
        if self.batches and all(b[1] <= self.start for b in self.batches):
            self.empty_end = self.end
        self.batches = [b for b in self.batches if b[1] > self.start]


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
