"""The history checker on hand-made histories: a clean one passes, and each anomaly is
found and named with its values and offsets (one history per kind, each a small
variation of the clean one so that exactly the intended fault is present)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from yak.chaos.checker import HistoryError, check

RC = "read_committed"
RU = "read_uncommitted"


def send(
    process: str,
    partition: str,
    value: Any,
    offset: int | None,
    status: str = "ok",
    txn: str | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "op": "send",
        "process": process,
        "partition": partition,
        "value": value,
        "status": status,
    }
    if offset is not None:
        op["offset"] = offset
    if txn is not None:
        op["txn"] = txn
    return op


def txn(process: str, key: str, action: str, status: str = "ok") -> dict[str, Any]:
    return {"op": "txn", "process": process, "txn": key, "action": action, "status": status}


def poll(
    process: str,
    records: list[tuple[str, int, Any]],
    isolation: str = RC,
    txn_key: str | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "op": "poll",
        "process": process,
        "isolation": isolation,
        "records": [{"partition": p, "offset": o, "value": v} for p, o, v in records],
    }
    if txn_key is not None:
        op["txn"] = txn_key
    return op


def clean_history() -> list[dict[str, Any]]:
    """Two idempotent producers, a committed and an aborted transaction spanning two
    partitions (offsets 3 and 5 hold the markers), a transaction whose commit timed out
    but that readers saw, and consumers of both isolation levels, one of which restarts."""
    return [
        send("p1", "a", 1, 0),
        send("p1", "a", 2, 1),
        send("p2", "b", 10, 0),
        txn("t1", "T1", "begin"),
        send("t1", "a", 100, 2, txn="T1"),
        send("t1", "b", 101, 1, txn="T1"),
        txn("t1", "T1", "commit"),
        txn("t1", "T2", "begin"),
        send("t1", "a", 200, 4, txn="T2"),
        send("t1", "b", 201, 3, txn="T2"),
        txn("t1", "T2", "abort"),
        send("p2", "b", 11, None, status="info"),  # unknown outcome, not read: fine
        send("p1", "a", 3, None, status="fail"),  # refused, never read: fine
        txn("t1", "T3", "begin"),
        send("t1", "a", 300, 6, txn="T3"),
        txn("t1", "T3", "commit", status="info"),  # timed out, but it did commit
        poll("c1", [("a", 0, 1), ("a", 1, 2), ("b", 0, 10)]),
        poll("c1", [("a", 2, 100), ("b", 1, 101), ("a", 6, 300)]),  # 200 aborted, 5 marker
        poll("c2", [("a", 0, 1), ("a", 1, 2), ("a", 2, 100), ("a", 4, 200)], isolation=RU),
        {"op": "reset", "process": "c2"},  # restarted from the beginning
        poll("c2", [("a", 0, 1), ("b", 0, 10), ("b", 1, 101), ("b", 3, 201)], isolation=RU),
    ]


def kinds(history: list[dict[str, Any]], **kw: Any) -> dict[str, int]:
    return check(history, **kw).counts


def test_clean_history_passes() -> None:
    result = check(clean_history())
    assert result.valid, [a.to_dict() for a in result.anomalies]
    assert result.stats["txns_committed"] == 2  # T1, and T3 proven by a read
    assert result.stats["txns_aborted"] == 1
    assert result.stats["records_read"] == 14
    json.dumps(result.to_dict())  # the report is JSON
    assert check(clean_history(), final_reads=True).valid


def test_lost_write() -> None:
    h = clean_history()
    h[16]["records"] = h[16]["records"][1:]  # nobody reads value 1 at a@0...
    h[18]["records"] = h[18]["records"][1:]
    h[20]["records"] = h[20]["records"][1:]
    result = check(h)
    (a,) = result.anomalies
    assert a.kind == "lost_write" and a.values == (1,) and a.partition == "a" and a.offsets == (0,)
    assert "offset 6 was read" in a.detail  # ...though later offsets were


def test_unseen_write_is_lost_only_after_final_reads() -> None:
    h = clean_history()
    h.insert(15, send("p1", "a", 4, 7))  # acked at the very end, nobody read that far
    assert check(h).valid
    assert kinds(h, final_reads=True) == {"lost_write": 1}
    h2 = clean_history()
    h2.append(send("t1", "b", 999, 9, txn="T9"))
    h2.append(txn("t1", "T9", "commit"))
    (a,) = check(h2, final_reads=True).anomalies
    assert a.kind == "lost_write" and a.txns == ("T9",)


def test_duplicate() -> None:
    h = clean_history()
    h.append(poll("c3", [("a", 7, 2)]))  # value 2 again, at another offset
    result = check(h)
    dup = [a for a in result.anomalies if a.kind == "duplicate"]
    assert len(dup) == 1 and dup[0].values == (2,) and dup[0].offsets == (1, 7)
    # the read at 7 also contradicts the ack at 1 only if it is the only position: not here
    assert set(result.counts) == {"duplicate"}


def test_duplicate_after_a_client_timeout_is_named_apart() -> None:
    """Run D (2026-11-27): librdkafka timed out in-flight sends after 120 s, bumped its
    producer epoch and resent what it still queued, so values already written were
    written again. Such a duplicate is the client's (documented), but only inside the
    window: its producer's timeout reported after the value was handed over and no later
    than the value's own fate."""
    def history(timeout_at: float, producer: str = "p") -> list[dict[str, Any]]:
        return [
            {**send("p", "a", "v1", 0), "sent": 1.0, "time": 2.0},
            {**send(producer, "a", "gone", None, status="info"), "error": "_MSG_TIMED_OUT",
             "sent": 0.5, "time": timeout_at},
            {**send("p", "a", "v2", 5), "sent": 3.0, "time": 9.0},  # also written at 1
            poll("c", [("a", 0, "v1"), ("a", 1, "v2"), ("a", 5, "v2")]),
        ]

    inside = check(history(6.0))
    assert set(inside.counts) == {"duplicate_after_client_timeout"}
    (a,) = inside.anomalies
    assert a.values == ("v2",) and a.offsets == (1, 5) and "6.0 s" in a.detail
    assert inside.failures(allowed={"duplicate_after_client_timeout"}) == []
    # a timeout before the value was handed over, after its fate, or another producer's
    for h in (history(2.5), history(9.5), history(6.0, producer="q")):
        assert set(check(h).counts) == {"duplicate"}


def test_inconsistent_offsets() -> None:
    h = clean_history()
    h.append(poll("c3", [("a", 1, 3)]))  # value 3 where value 2 is (and 3 was refused)
    (a,) = [x for x in check(h).anomalies if x.kind == "inconsistent_offsets"]
    assert set(a.values) == {2, 3} and a.partition == "a" and a.offsets == (1,)
    h2 = clean_history()
    h2[1]["offset"] = 9  # acked at 9, read at 1
    (b,) = check(h2).anomalies
    assert b.kind == "inconsistent_offsets" and b.offsets == (9, 1) and b.values == (2,)
    h3 = clean_history()
    h3.append(poll("c3", [("b", 8, 3)], isolation=RU))  # 3 was sent to a, read in b
    assert "inconsistent_offsets" in kinds(h3)
    h4 = clean_history()
    h4.append(send("p3", "b", 50, 0))  # two producers acked at b@0
    result = check(h4)
    assert result.counts == {"inconsistent_offsets": 1, "lost_write": 1}  # 50 never read
    (c,) = [x for x in result.anomalies if x.kind == "inconsistent_offsets"]
    assert set(c.values) == {10, 50} and c.offsets == (0,)


def test_aborted_read_g1a() -> None:
    h = clean_history()
    h[17]["records"].insert(1, {"partition": "a", "offset": 4, "value": 200})
    (a,) = check(h).anomalies
    assert a.kind == "aborted_read" and a.values == (200,) and a.txns == ("T2",)
    assert a.offsets == (4,) and a.processes == ("c1",)
    # the same read at read_uncommitted is allowed (c2 does it in the clean history)
    h2 = clean_history()
    h2.append(txn("t1", "T4", "begin"))
    h2.append(send("t1", "b", 400, 5, txn="T4"))  # producer killed: never committed
    h2.append(poll("c4", [("b", 5, 400)]))
    assert kinds(h2) == {"aborted_read": 1}
    h3 = clean_history()
    h3.append(txn("t1", "T5", "begin"))
    h3.append(send("t1", "b", 500, 5, txn="T5"))
    h3.append(txn("t1", "T5", "commit", status="fail"))
    h3.append(poll("c4", [("b", 5, 500)]))
    assert kinds(h3) == {"aborted_read": 1}


def test_never_sent() -> None:
    h = clean_history()
    h.append(poll("c3", [("b", 9, "ghost")], isolation=RU))
    (a,) = check(h).anomalies
    assert a.kind == "never_sent" and a.values == ("ghost",) and a.offsets == (9,)


def test_nonmonotonic_poll_and_reset() -> None:
    h = clean_history()
    h.append(poll("c1", [("a", 1, 2)]))  # c1 goes back without a reset
    (a,) = check(h).anomalies
    assert a.kind == "nonmonotonic_poll" and a.offsets == (6, 1) and a.processes == ("c1",)
    h2 = clean_history()
    h2.append({"op": "reset", "process": "c1", "partitions": ["a"]})  # e.g. a rebalance
    h2.append(poll("c1", [("a", 1, 2)]))
    assert check(h2).valid


def test_poll_skip() -> None:
    h = clean_history()
    h[16] = poll("c1", [("a", 0, 1), ("b", 0, 10)])  # c1 reads a@0 then a@2: skips a@1
    (a,) = check(h).anomalies
    assert a.kind == "poll_skip" and a.values == (2,) and a.offsets == (1,) and a.partition == "a"
    # skipping only aborted data and markers is what read_committed does (c1's a@2 -> a@6)


def test_nonmonotonic_send() -> None:
    h = clean_history()
    h.insert(2, send("p1", "c", 7, 5))
    h.insert(3, send("p1", "c", 8, 4))  # acked after 7 but placed before it
    result = check(h, final_reads=False)
    (a,) = [x for x in result.anomalies if x.kind == "nonmonotonic_send"]
    assert a.values == (7, 8) and a.offsets == (5, 4) and a.processes == ("p1",)


def test_torn_transaction() -> None:
    h = clean_history()
    h.insert(6, send("t1", "a", 102, 3, txn="T1"))  # T1 also wrote a@3
    # c1 reads a@2 (100) and then a@6: it read over 102 at a@3 but saw 100 and 101
    result = check(h)
    torn = [x for x in result.anomalies if x.kind == "torn_transaction"]
    assert len(torn) == 1 and torn[0].values == (102,) and torn[0].txns == ("T1",)
    assert torn[0].offsets == (3,) and torn[0].processes == ("c1",)
    assert "poll_skip" in result.counts  # the same gap seen as a skip
    # a consumer that stopped reading in the middle of the transaction is not torn
    h2 = copy.deepcopy(h)
    h2[18]["records"] = h2[18]["records"][:2]
    assert "torn_transaction" not in kinds(h2)


def test_torn_across_partitions() -> None:
    h = clean_history()
    # c1 sees T1's value in a, and in b reads from b@0 to b@4 without T1's 101 at b@1
    h[17]["records"] = [
        {"partition": "a", "offset": 2, "value": 100},
        {"partition": "a", "offset": 6, "value": 300},
    ]
    h.append(send("p2", "b", 12, 4))
    h.append(poll("c1", [("b", 4, 12)]))
    result = check(h)
    (t,) = [x for x in result.anomalies if x.kind == "torn_transaction"]
    assert t.partition == "b" and t.values == (101,)


def _ctp(cycle: str) -> list[dict[str, Any]]:
    """Consume-transform-produce transactions X and Y over partitions p and q."""
    h: list[dict[str, Any]] = []
    if cycle == "G0":
        # X before Y in p, Y before X in q (by each transaction's last write)
        h += [
            send("x", "p", "x1", 0, txn="X"),
            send("y", "p", "y1", 1, txn="Y"),
            send("y", "q", "y2", 0, txn="Y"),
            send("x", "q", "x2", 1, txn="X"),
        ]
    else:
        # X writes p then reads Y's q value; Y writes after X in p, reads nothing of X:
        # X -ww-> Y in p, Y -wr-> X through q
        h += [
            send("x", "p", "x1", 0, txn="X"),
            send("y", "p", "y1", 1, txn="Y"),
            send("y", "q", "y2", 0, txn="Y"),
            poll("x", [("q", 0, "y2")], txn_key="X"),
        ]
    h += [txn("x", "X", "commit"), txn("y", "Y", "commit")]
    return h


def test_g0_write_cycle() -> None:
    result = check(_ctp("G0"))
    (a,) = result.anomalies
    assert a.kind == "G0" and set(a.txns) == {"X", "Y"} and "-ww->" in a.detail
    assert result.failures(allowed={"G0"}) == []


def test_g1c_cycle() -> None:
    (a,) = check(_ctp("G1c")).anomalies
    assert a.kind == "G1c" and set(a.txns) == {"X", "Y"}
    assert "-wr->" in a.detail and "-ww->" in a.detail
    h = _ctp("G1c")
    h[-1]["status"] = "fail"  # Y aborted: no cycle among committed transactions
    assert "G1c" not in kinds(h)


@pytest.mark.parametrize(
    "bad",
    [
        [{"op": "nope"}],
        [{"op": "send", "process": "p", "partition": "a"}],  # no value
        [send("p", "a", 1, 0), send("p", "a", 1, 1)],  # value sent twice
        [send("p", "a", 1, -3)],
        [send("p", "a", 1, 0, status="maybe")],
        [poll("c", [("a", 0, 1)], isolation="serializable")],
        [{"op": "poll", "process": "c", "records": "x"}],
        [txn("p", "T", "rollback")],
        ["not an object"],
    ],
)
def test_malformed_histories_are_refused_with_a_reason(bad: list[Any]) -> None:
    with pytest.raises(HistoryError):
        check(bad)


def test_report_is_bounded_and_json() -> None:
    h = [send("p", "a", i, i) for i in range(3000)]
    h.append(poll("c", [("a", 2999, 2999)]))
    result = check(h)
    assert result.counts == {"lost_write": 2999}
    assert len(result.anomalies) == 1000  # examples capped, counts exact
    back = json.loads(json.dumps(result.to_dict()))
    assert back["anomaly_counts"] == {"lost_write": 2999} and back["valid"] is False


def test_nemesis_operations_are_skipped() -> None:
    h = clean_history()
    h.insert(3, {"op": "nemesis", "fault": "kill", "target": "broker 2", "phase": "start"})
    assert check(h).valid


def pipeline_history() -> list[dict[str, Any]]:
    """Two input values, each transformed once in a committed transaction (a first try
    of input 1 was aborted and retried); the pipeline drained the input partition."""
    return [
        send("p1", "in-0", 1, 0),
        send("p1", "in-0", 2, 1),
        poll("e1", [("in-0", 0, 1)], txn_key="E1"),
        txn("e1", "E1", "begin"),
        {**send("e1", "out-0", "e:1#1", 0, txn="E1"), "source": 1},
        txn("e1", "E1", "abort"),
        {"op": "reset", "process": "e1", "partitions": ["in-0"]},
        txn("e1", "E2", "begin"),
        poll("e1", [("in-0", 0, 1), ("in-0", 1, 2)], txn_key="E2"),
        {**send("e1", "out-0", "e:1#2", 2, txn="E2"), "source": 1},
        {**send("e1", "out-0", "e:2#2", 3, txn="E2"), "source": 2},
        txn("e1", "E2", "commit"),
        {"op": "drained", "process": "e1", "partitions": ["in-0"]},
        poll("final", [("out-0", 2, "e:1#2"), ("out-0", 3, "e:2#2")]),
    ]


def test_pipeline_exactly_once_passes() -> None:
    result = check(pipeline_history(), final_reads=True)
    assert result.valid, [a.to_dict() for a in result.anomalies]


def test_pipeline_duplicate_output() -> None:
    h = pipeline_history()
    h[5] = txn("e1", "E1", "commit")  # the first try committed too: input 1 came out twice
    h[-1]["records"].insert(0, {"partition": "out-0", "offset": 0, "value": "e:1#1"})
    result = check(h, final_reads=True)
    assert result.counts == {"duplicate": 1}
    (a,) = result.anomalies
    assert a.values == ("e:1#1", "e:1#2") and a.offsets == (0, 2)
    assert a.txns == ("E1", "E2") and "input 1" in a.detail


def test_pipeline_lost_input() -> None:
    h = pipeline_history()
    del h[10]  # input 2 never came out, though the pipeline drained in-0
    h[-1]["records"] = h[-1]["records"][:1]
    result = check(h, final_reads=True)
    assert result.counts == {"lost_write": 1}
    assert result.anomalies[0].values == (2,) and "pipeline" in result.anomalies[0].detail
    # without the drained claim nothing is owed yet
    assert check([op for op in h if op["op"] != "drained"], final_reads=True).valid


def test_compact_records_read_the_same() -> None:
    h = clean_history()
    for op in h:
        if op["op"] == "poll":
            op["records"] = [[r["partition"], r["offset"], r["value"]] for r in op["records"]]
    assert check(h).to_dict() == check(clean_history()).to_dict()
    h[16]["records"][0] = ["a", 0]  # two fields: malformed
    with pytest.raises(HistoryError):
        check(h)


def test_value_read_earlier_but_missing_from_final_reads_is_lost() -> None:
    """Truncated after it was read (an unclean election): the final reader, which read
    the partition to its end, decides what survived."""
    h = [
        send("p1", "a", 1, 0),
        send("p1", "a", 2, 1),
        poll("c1", [("a", 0, 1), ("a", 1, 2)], isolation=RU),
        send("p1", "a", 3, 1),  # the new leader's log reuses offset 1
        {"op": "reset", "process": "final", "final": True, "partitions": ["a", "b"]},
        {**poll("final", [("a", 0, 1), ("a", 1, 3)]), "final": True},
    ]
    result = check(h, final_reads=True)
    lost = [a for a in result.anomalies if a.kind == "lost_write"]
    assert [a.values for a in lost] == [(2,)]
    assert "c1 read it at offset 1" in lost[0].detail
    assert result.counts["inconsistent_offsets"] == 1
    # a final reader covering a partition nobody wrote is fine; one value it misses is not
    h.insert(0, send("p2", "b", 9, 0))
    assert check(h, final_reads=True).counts["lost_write"] == 2


def test_pipeline_input_written_twice_goes_through_twice() -> None:
    """A producer's duplicate in the input is the producer's anomaly, not the pipeline's:
    each position of the input value gets its own output."""
    h = pipeline_history()
    h.insert(2, send("p1", "in-0", "dup", None, status="info"))  # its retry landed twice
    for op in h:
        if op.get("op") == "send" and "source" in op:
            op["source_at"] = ["in-0", 0 if op["source"] == 1 else 1]
    h.insert(-2, {**send("e1", "out-0", "dup>E2a", 4, txn="E2"), "source": "dup",
                  "source_at": ["in-0", 2]})
    h.insert(-2, {**send("e1", "out-0", "dup>E2b", 5, txn="E2"), "source": "dup",
                  "source_at": ["in-0", 3]})
    result = check(h)
    assert result.counts == {}, [a.to_dict() for a in result.anomalies]
    h[-3]["source_at"] = ["in-0", 2]  # two outputs for one position: exactly-once broken
    assert check(h).counts == {"duplicate": 1}
