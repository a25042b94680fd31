"""Random interleavings of producers' requests, marker completions, log stalls, time
passing and coordinator failovers against the transaction state machine.

Two transactional ids, each used by up to three producer instances (a restarted
producer is a new instance; the old one becomes a zombie). Requests run as concurrent
tasks; the log can stall (requests pile up behind an in-flight write) and fail;
marker writes are answered in random order, with retriable errors; a failover hands
every `__transaction_state` partition to a new coordinator instance at a higher
epoch while the old one still has writes and marker calls in flight.

Checked after every step and at the end:
- never two transactions open for one id: the states written for an id follow the
  state machine, so no Ongoing/Prepare record can follow a Prepare record without the
  Complete record in between;
- an epoch never goes backwards (per producer id, in the log and in memory);
- a fenced producer never completes: once a newer epoch (or producer id) for an id is
  in the log, no EndTxn/AddPartitions/verification of the older one succeeds, and every
  COMMIT marker carries an epoch some producer was actually given (never a fencing one);
- a transaction is completed only once each of its partitions has its marker, and
  every marker carries a decision (PrepareCommit/PrepareAbort) that is in the log;
- memory follows the log: an id with nothing pending looks exactly like its last record;
- nothing raises, and once faults stop, every transaction finishes (markers written,
  Complete record written) and nothing stays pending.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yak.coordinator.timer import ManualClock, TimerQueue
from yak.errors import ErrorCode, error_for_code
from yak.txn import records as rec
from yak.txn.coordinator import TransactionCoordinator, TxnConfig
from yak.txn.state import TransactionState, valid_previous_states

from .fakes import CountingProducerIds, FakeMarkerWriter, MemoryTransactionLog

S = TransactionState
E = ErrorCode
IDS = ["txn-a", "txn-b"]
TPS = [("t", 0), ("t", 1), ("u", 0)]
RETRIABLE_MARKER = [E.not_leader_or_follower, E.request_timed_out, E.not_enough_replicas]
APPEND_FAILURES = [E.not_enough_replicas, E.not_leader_or_follower, E.kafka_storage_error]

# (kind, a, b, flag); repeats in the kind list weight producers' calls over faults
KINDS = (
    ["init"] * 3
    + ["add"] * 5
    + ["end"] * 4
    + ["verify"]
    + ["marker"] * 4
    + ["advance"] * 2
    + ["stall", "fail"]
    + ["failover"]
)
OPS = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 5), st.integers(0, 4), st.booleans()),
    min_size=10,
    max_size=80,
)
ADVANCE_MS = [50, 200, 1_000, 4_000, 7_000]


class ErrorLogs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def settle() -> None:
    for _ in range(40):
        await asyncio.sleep(0)


class World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.log = MemoryTransactionLog(3)
        self.markers = FakeMarkerWriter(manual=True)
        self.pids = CountingProducerIds()
        self.epoch = 0
        self.coords: list[tuple[TransactionCoordinator, TimerQueue]] = []
        # client view: (id, instance) -> (producer id, epoch)
        self.clients: dict[tuple[int, int], tuple[int, int]] = {}
        self.given: dict[str, set[tuple[int, int]]] = {t: set() for t in IDS}
        self.newest: dict[str, tuple[int, int]] = {}  # newest (pid, epoch) handed out
        self.tasks: list[asyncio.Task[Any]] = []
        self.violations: list[str] = []
        self.mem_epochs: dict[tuple[str, int], int] = {}
        self._seen = [0] * self.log.num_partitions
        self._last: dict[str, Any] = {}

    @property
    def coord(self) -> TransactionCoordinator:
        return self.coords[-1][0]

    async def new_coordinator(self) -> None:
        timers = TimerQueue(self.clock)
        coord = TransactionCoordinator(
            self.log,
            self.log,
            self.markers,
            self.pids,
            TxnConfig(
                abort_timed_out_interval_ms=1_000,
                retry_backoff_ms=100,
                transaction_max_timeout_ms=10_000,
            ),
            self.clock,
            timers=timers,
        )
        for p in range(self.log.num_partitions):
            self.log.leader_epochs[p] = self.epoch
        await coord.start()  # loads every partition led here
        self.coords.append((coord, timers))
        for p in range(self.log.num_partitions):
            await coord.on_election(p, self.epoch)

    # ------------------------------------------------------------ client calls

    def spawn(self, coro: Any) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    async def init(self, i: int, inst: int, kip360: bool) -> None:
        tid = IDS[i]
        pid, epoch = self.clients.get((i, inst), (-1, -1)) if kip360 else (-1, -1)
        r = await self.coord.init_producer_id(tid, 5_000, pid, epoch)
        if r.error is not E.none:
            return
        got = (r.producer_id, r.producer_epoch)
        self.given[tid].add(got)
        self.newest[tid] = got
        self.clients[(i, inst)] = got

    def client(self, k: int) -> tuple[str, int, int] | None:
        if not self.clients:
            return None
        i, inst = sorted(self.clients)[k % len(self.clients)]
        return (IDS[i], *self.clients[(i, inst)])

    async def add(self, k: int, tp_index: int) -> None:
        c = self.client(k)
        if c is None:
            return
        tid, pid, epoch = c
        res = await self.coord.add_partitions_to_txn(tid, pid, epoch, {TPS[tp_index]})
        if res[TPS[tp_index]] is E.none and self.is_fenced(tid, pid, epoch):
            self.violations.append(f"fenced {tid} {pid}/{epoch} added a partition")

    async def end(self, k: int, commit: bool) -> None:
        c = self.client(k)
        if c is None:
            return
        tid, pid, epoch = c
        err = await self.coord.end_txn(tid, pid, epoch, commit)
        if err is E.none and self.is_fenced(tid, pid, epoch):
            self.violations.append(f"fenced {tid} {pid}/{epoch} ended a transaction")

    def verify(self, k: int, tp_index: int) -> None:
        c = self.client(k)
        if c is None:
            return
        tid, pid, epoch = c
        res = self.coord.verify_partitions(tid, pid, epoch, {TPS[tp_index]})
        if res[TPS[tp_index]] is E.none and self.is_fenced(tid, pid, epoch):
            self.violations.append(f"fenced {tid} {pid}/{epoch} passed verification")

    async def answer_marker(self, k: int, err_index: int, ok: bool) -> None:
        pending = self.markers.pending()
        if not pending:
            return
        call = pending[k % len(pending)]
        self.markers.answer(call, E.none if ok else RETRIABLE_MARKER[err_index % 3])

    async def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        for _coord, timers in self.coords:
            timers.run_due()

    # ------------------------------------------------------------ invariants

    def records(self) -> dict[str, list[Any]]:
        per_id: dict[str, list[Any]] = {}
        for p in range(self.log.num_partitions):
            for key, value in self.log.parts[p]:
                tid = rec.decode_key(key)
                assert tid is not None
                per_id.setdefault(tid, []).append(
                    None if value is None else rec.decode_value(value)
                )
        return per_id

    def is_fenced(self, tid: str, pid: int, epoch: int) -> bool:
        """A newer epoch (or producer id) for `tid` is in the log: (pid, epoch) is a zombie."""
        for p, part in enumerate(self.log.parts):  # fold in records appended since last time
            for key, value in part[self._seen[p] :]:
                if value is not None:
                    self._last[rec.decode_key(key) or ""] = rec.decode_value(value)
            self._seen[p] = len(part)
        last = self._last.get(tid)
        return last is not None and (last.producer_id != pid or last.producer_epoch > epoch)

    def check(self) -> None:
        assert not self.violations, self.violations
        per_id = self.records()
        decided: set[tuple[int, int, bool, tuple[str, int]]] = set()
        written = {(tp, pid, epoch, commit) for tp, pid, epoch, commit, _ in self.markers.written}
        for tid, values in per_id.items():
            prev = None
            for t in values:
                assert t is not None  # no id expires within these runs
                if prev is not None:
                    assert prev.state in valid_previous_states(t.state), (
                        f"{tid}: {prev.state.label} -> {t.state.label} written"
                    )
                    if t.producer_id == prev.producer_id:
                        assert t.producer_epoch >= prev.producer_epoch, f"{tid} epoch went back"
                    else:
                        assert t.producer_epoch == 0 and t.state is S.EMPTY
                    if t.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                        # completed only once every partition has its marker
                        commit = t.state is S.COMPLETE_COMMIT
                        for tp in prev.partitions:
                            assert (tp, prev.producer_id, prev.producer_epoch, commit) in written, (
                                f"{tid} completed before its marker reached {tp}"
                            )
                if t.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    for tp in t.partitions:
                        commit = t.state is S.PREPARE_COMMIT
                        decided.add((t.producer_id, t.producer_epoch, commit, tp))
                prev = t
        for m in self.coord.transactions():
            key = (m.transactional_id, m.producer_id)
            assert m.producer_epoch >= self.mem_epochs.get(key, -1), "epoch went back in memory"
            self.mem_epochs[key] = m.producer_epoch
            values = per_id.get(m.transactional_id)
            if m.pending or not values:
                continue
            last = values[-1]
            assert (last.state, last.producer_id, last.producer_epoch, last.partitions) == (
                m.state,
                m.producer_id,
                m.producer_epoch,
                frozenset(m.partitions),
            ), f"{m.transactional_id}: memory {m} differs from its last record {last}"
        handed_out = {(pid, epoch) for s in self.given.values() for pid, epoch in s}
        for tp, pid, epoch, commit, _ce in self.markers.written:
            # every marker carries a decision that is in the log, for a partition of it
            assert (pid, epoch, commit, tp) in decided, f"marker {tp} {pid}/{epoch} {commit}"
            if commit:
                assert (pid, epoch) in handed_out, f"COMMIT marker with fencing epoch {epoch}"


async def play(ops: list[tuple[str, int, int, bool]]) -> None:
    w = World()
    await w.new_coordinator()
    for kind, a, b, flag in ops:
        if kind == "init":
            w.spawn(w.init(a % 2, b % 3, flag))
        elif kind == "add":
            w.spawn(w.add(a, b % 3))
        elif kind == "end":
            w.spawn(w.end(a, flag))
        elif kind == "verify":
            w.verify(a, b % 3)
        elif kind == "marker":
            await w.answer_marker(a, b, flag or b == 0)
        elif kind == "advance":
            await w.advance(ADVANCE_MS[b])
        elif kind == "stall":
            if flag and w.log.hold is None:
                w.log.hold = asyncio.Event()
            elif not flag and w.log.hold is not None:
                w.log.hold.set()
                w.log.hold = None
        elif kind == "fail":
            w.log.fail_next.append(error_for_code(APPEND_FAILURES[b % 3]))
        elif kind == "failover":
            for coord, _timers in w.coords:
                for p in range(w.log.num_partitions):
                    coord.on_resignation(p)
            w.epoch += 1
            await w.new_coordinator()
        await settle()
        w.check()

    # faults stop: the log flows, every marker lands, time passes every timeout
    if w.log.hold is not None:
        w.log.hold.set()
        w.log.hold = None
    w.log.fail_next.clear()
    for _ in range(60):
        await settle()
        for call in w.markers.pending():
            w.markers.answer(call)
        await w.advance(1_000)
        if not (
            w.coord.open_transactions() or w.coord.pending_marker_jobs() or w.markers.pending()
        ):
            break
    await settle()
    w.check()
    await asyncio.gather(*w.tasks)  # every request was answered, none raised
    coord = w.coord
    for m in coord.transactions():
        assert not m.pending, f"{m.transactional_id} stuck pending {m.pending_state}"
        assert m.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT), m
    assert coord.open_transactions() == 0 and coord.pending_marker_jobs() == 0
    for c, _t in w.coords:
        await c.stop()


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(OPS)
def test_random_interleavings_keep_the_transaction_invariants(
    ops: list[tuple[str, int, int, bool]],
) -> None:
    errors = ErrorLogs()
    logger = logging.getLogger("yak.txn")
    logger.addHandler(errors)
    try:
        asyncio.run(play(ops))
    finally:
        logger.removeHandler(errors)
    assert not errors.records, [r.getMessage() for r in errors.records]
