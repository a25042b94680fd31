"""The history checker for Kafka "queue" workloads (Jepsen-style), as one pure function.

A workload (the transactions tests of issue 12, the `yak chaos` tool of issue 16) logs
what its producers and consumers did as a list of JSON-serializable operations; `check`
reads that list and names every anomaly it can prove, with the values, partitions and
offsets involved. Nothing here touches a broker, a file or a clock.

History format (one dict per operation, in the order they completed; extra keys are
ignored, so workloads can add timestamps for their own plots):

    {"op": "send", "process": "p1", "partition": "orders-0", "value": 17,
     "status": "ok", "offset": 42, "txn": "p1-t3"}
        status "ok": acknowledged (`offset` is the acked offset, if the client reports it);
        "info": outcome unknown (timeout, broker killed); "fail": refused. Outside a
        transaction a failed send may still have been written (Kafka cannot say), so
        only an ok send is owed to readers. `txn` names the transaction it belongs to.
    {"op": "txn", "process": "p1", "txn": "p1-t3", "action": "begin|commit|abort",
     "status": "ok|fail|info"}
        A transaction commits only through a commit: one that returned ok committed;
        one that failed (definite error) or was never attempted did not; an unknown
        ("info") commit is decided by what readers saw.
    {"op": "poll", "process": "c1", "isolation": "read_committed|read_uncommitted",
     "records": [{"partition": "orders-0", "offset": 42, "value": 17}, ...],
     "txn": "c1-t9"}
        `txn` only for a poll made inside a consume-transform-produce transaction. A
        record may also be written compactly as `["orders-0", 42, 17]` (long runs).
    {"op": "reset", "process": "c1", "partitions": ["orders-0"]}
        The consumer's position moved on purpose (assign, seek, rebalance, restart):
        order checks start afresh for those partitions (all if `partitions` is absent).
    {"op": "poll", ..., "final": true} / {"op": "reset", ..., "final": true, "partitions": [..]}
        A final reader: it read these partitions from the start to their end after the
        faults stopped. An acknowledged value missing from its reads is lost, even if
        another consumer read it earlier (it was in the log, then it was gone).
    {"op": "send", ..., "value": "e1:17", "txn": "e1-t4", "source": 17,
     "source_at": ["orders-0", 42]}
        A consume-transform-produce pipeline's output names the input value it was made
        from (output values stay unique: a retried transaction writes new ones), and
        optionally where it read it: an input value that is in the log twice (a producer's
        duplicate) rightly goes through twice, once per position.
    {"op": "drained", "process": "e1", "partitions": ["orders-0"]}
        The pipeline consumed these input partitions to their end and committed: every
        committed input value there is owed exactly one committed output.
    {"op": "nemesis", ...}
        Faults injected (for the report's timeline); the checker skips them.

Values must be unique across the history (one send per value); partitions are any
JSON scalars (lists are read as tuples). Anomalies (`Anomaly.kind`):

    lost_write          acknowledged (and committed), never read, though a reader read
                        past its offset (or, with final_reads=True, at all)
    duplicate           one value read at two or more positions
    duplicate_after_client_timeout
                        a duplicate the client made: its producer reported an in-flight
                        send timed out (librdkafka's _MSG_TIMED_OUT) after this value was
                        handed over and before its own fate, so the producer bumped its
                        epoch and resent it (librdkafka documents this); counted and shown,
                        allowed by `yak chaos run`, never by the checker itself
    inconsistent_offsets two values at one position (reads or acks), or a value read
                        somewhere other than where it was acknowledged
    aborted_read        G1a: a read_committed poll returned a value of an aborted
                        transaction
    never_sent          a poll returned a value no send produced
    nonmonotonic_poll   a consumer read an offset at or below one it read before
                        (in one partition, without a reset in between)
    poll_skip           a consumer jumped over a value it should have seen
    nonmonotonic_send   a producer's later acknowledged send landed below an earlier one
    torn_transaction    a read_committed consumer saw part of a committed transaction:
                        it read over the offsets of the rest and missed them
    (pipelines)         an input value with two committed outputs is a `duplicate`; one
                        with none, in a drained partition, a `lost_write`
    G0                  a cycle of write-write dependencies between committed
                        transactions (per-partition offset order of their last writes)
    G1c                 a cycle of write-write and write-read dependencies

Kafka does not order transactions' writes across partitions, so concurrent
transactional producers writing the same partitions can legitimately produce G0
(Jepsen's Kafka and Redpanda analyses): a workload that does so passes
`allowed={"G0"}` to `CheckResult.failures`.

The checks live beside this module, by what they judge: `checker_history.py` parses the
history (and decides each transaction's fate), `checker_reads.py` checks each partition's
acknowledgements and reads, `checker_txns.py` the transactions; `anomalies.py` holds the
result types. `check` runs them in a fixed order, so a history's report is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from yak.chaos.anomalies import ANOMALY_KINDS, Anomaly, CheckResult, HistoryError, Report
from yak.chaos.checker_history import History
from yak.chaos.checker_reads import (
    check_consumer_order,
    check_lost,
    check_positions,
    check_producer_order,
    check_reads_against_sends,
)
from yak.chaos.checker_txns import check_cycles, check_pipeline, check_torn

__all__ = ["check", "CheckResult", "Anomaly", "HistoryError", "ANOMALY_KINDS"]


def check(history: Iterable[Mapping[str, Any]], *, final_reads: bool = False) -> CheckResult:
    """Check a history; `final_reads=True` when consumers read every partition to its end
    after the faults stopped, so an acknowledged value nobody read is lost even if no
    later offset was read."""
    h = History(history)
    rep = Report()
    check_reads_against_sends(h, rep)
    check_positions(h, rep)
    check_lost(h, rep, final_reads)
    check_consumer_order(h, rep)
    check_producer_order(h, rep)
    check_torn(h, rep)
    check_cycles(h, rep)
    check_pipeline(h, rep, final_reads)
    committed = sum(1 for t in h.txns.values() if t.fate == "committed")
    rep.result.stats = {
        "operations_sends": len(h.send_order),
        "sends_acked": sum(1 for s in h.send_order if s.status == "ok"),
        "polls": h.polls,
        "records_read": len(h.reads),
        "distinct_values_read": len({r.value for r in h.reads}),
        "txns_committed": committed,
        "txns_aborted": sum(1 for t in h.txns.values() if t.fate == "aborted"),
        "txns_unknown": sum(1 for t in h.txns.values() if t.fate == "unknown"),
    }
    rep.result.counts = {k: v for k, v in rep.result.counts.items() if v}
    return rep.result
