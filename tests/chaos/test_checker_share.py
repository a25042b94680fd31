"""The share-group checker (yak/chaos/checker_share.py) on hand-made histories: a clean
one passes, and each anomaly is found and named (one history per kind, each a small
variation of the clean one, so that exactly the intended fault is present); the cases
the checker must not call anomalies (unknown outcomes, unseen acquisitions) pass."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from yak.chaos.anomalies import HistoryError
from yak.chaos.checker import check
from yak.chaos.checker_share import (
    SHARE_ANOMALY_KINDS,
    check_share,
    is_share_op,
    merge_results,
)

LIMIT = 3
LIMIT_REASON = "delivery count limit reached"


def send(value: str, offset: int, partition: str = "s-0", status: str = "ok") -> dict[str, Any]:
    op = {"op": "send", "process": "p0", "partition": partition, "value": value,
          "status": status, "time": 0.1}
    if status == "ok":
        op["offset"] = offset
    return op


def poll(process: str, t: float, *records: tuple[str, int, str, int | None]) -> dict[str, Any]:
    return {"op": "share_poll", "process": process, "time": t,
            "records": [list(r) for r in records]}


def ack(process: str, t: float, status: str, *acks: tuple[str, int, str, int | None, str],
        error: str | None = None) -> dict[str, Any]:
    op = {"op": "share_ack", "process": process, "time": t, "status": status,
          "acks": [list(a) for a in acks]}
    if error:
        op["error"] = error
    return op


def dlq(*records: tuple[str, str, int, int, str]) -> dict[str, Any]:
    return {"op": "share_dlq", "final": True, "time": 50.0, "records": [list(r) for r in records]}


def clean() -> list[dict[str, Any]]:
    """a: accepted at once. b: released once, accepted at delivery 2. c: rejected.
    d: released at every delivery up to the limit (3): dead-lettered. e: its first ACCEPT
    failed (lock expired), accepted at delivery 2 by another member."""
    return [
        {"op": "share_config", "topic": "s", "partitions": ["s-0", "s-1"], "group": "g",
         "dlq": "s-dlq", "limit": LIMIT, "time": 0.0},
        send("a", 0), send("b", 1), send("c", 2), send("d", 0, "s-1"), send("e", 1, "s-1"),
        poll("m0", 1.0, ("s-0", 0, "a", 1), ("s-0", 1, "b", 1), ("s-0", 2, "c", 1)),
        ack("m0", 1.1, "ok", ("s-0", 0, "a", 1, "accept"), ("s-0", 1, "b", 1, "release"),
            ("s-0", 2, "c", 1, "reject")),
        poll("m1", 1.2, ("s-1", 0, "d", 1), ("s-1", 1, "e", 1)),
        ack("m1", 1.3, "ok", ("s-1", 0, "d", 1, "release")),
        ack("m1", 20.0, "fail", ("s-1", 1, "e", 1, "accept"), error="INVALID_RECORD_STATE"),
        poll("m0", 2.0, ("s-0", 1, "b", 2), ("s-1", 0, "d", 2)),
        ack("m0", 2.1, "ok", ("s-0", 1, "b", 2, "accept"), ("s-1", 0, "d", 2, "release")),
        poll("m0", 3.0, ("s-1", 0, "d", 3)),
        ack("m0", 3.1, "ok", ("s-1", 0, "d", 3, "release")),
        poll("m0", 19.0, ("s-1", 1, "e", 2)),
        ack("m0", 19.5, "ok", ("s-1", 1, "e", 2, "accept")),
        {"op": "share_drained", "process": "share", "time": 40.0},
        dlq(("c", "s-0", 2, 1, "rejected"), ("d", "s-1", 0, 3, LIMIT_REASON)),
    ]


def kinds(ops: list[dict[str, Any]]) -> dict[str, int]:
    return check_share(ops).counts


def test_the_clean_history_passes_with_its_counts() -> None:
    r = check_share(clean())
    assert r.valid, r.anomalies
    s = r.stats
    assert s["share_sends_acked"] == 5
    assert s["share_deliveries"] == 9 and s["share_values_delivered"] == 5
    assert s["share_redeliveries"] == 4 and s["share_max_delivery_count"] == 3
    assert s["share_acks_accept_ok"] == 3 and s["share_acks_accept_fail"] == 1
    assert s["share_acks_release_ok"] == 4 and s["share_acks_reject_ok"] == 1
    assert s["share_values_accepted"] == 3
    assert s["dlq_records"] == 2 and s["dlq_values"] == 2
    assert s["share_values_outcome_unknown"] == 0 and s["share_drained"] == 1


def test_a_history_without_the_share_workload_is_empty_and_valid() -> None:
    r = check_share([send("x", 0)])
    assert r.valid and r.counts == {} and r.stats == {}


def test_an_acknowledged_value_never_delivered_is_found_after_the_drain_only() -> None:
    ops = clean()
    ops.insert(1, send("z", 3))
    assert kinds(ops) == {"share_undelivered": 1}
    [a] = check_share(ops).anomalies
    assert a.values == ("z",) and a.partition == "s-0" and a.offsets == (3,)
    undrained = [op for op in ops if op["op"] != "share_drained"]
    assert kinds(undrained) == {}  # not judged: the consumers may have stopped early


def test_an_unacknowledged_send_is_not_owed() -> None:
    ops = clean()
    ops.insert(1, send("z", 3, status="info"))
    assert kinds(ops) == {}


def test_a_value_in_the_dlq_only_is_not_lost() -> None:
    """Acquired up to the limit by fetches whose answers never arrived (the broker died
    after persisting each acquisition): dead-lettered without a delivery anyone saw."""
    ops = clean()
    ops.insert(1, send("z", 3))
    ops[-1]["records"].append(["z", "s-0", 3, 3, LIMIT_REASON])
    r = check_share(ops)
    assert r.valid, r.anomalies
    assert r.stats["dlq_values_never_delivered"] == 1


def test_a_delivery_of_a_value_never_sent() -> None:
    ops = clean()
    ops.insert(-2, poll("m1", 30.0, ("s-0", 9, "ghost", 1)))
    ops.insert(-2, ack("m1", 30.1, "ok", ("s-0", 9, "ghost", 1, "accept")))
    assert kinds(ops) == {"share_never_sent": 1}


def test_a_delivery_at_another_offset_than_the_acknowledged_one() -> None:
    ops = clean()
    ops[6]["records"][0] = ["s-0", 5, "a", 1]
    ops[7]["acks"][0] = ["s-0", 5, "a", 1, "accept"]
    assert kinds(ops) == {"share_wrong_position": 1}


def test_a_value_accepted_twice() -> None:
    ops = clean()
    ops.insert(-2, poll("m1", 30.0, ("s-0", 0, "a", 2)))
    ops.insert(-2, ack("m1", 30.1, "ok", ("s-0", 0, "a", 2, "accept")))
    k = kinds(ops)
    assert k == {"acknowledged_twice": 1, "delivered_after_accept": 1}
    a = next(x for x in check_share(ops).anomalies if x.kind == "acknowledged_twice")
    assert a.values == ("a",) and set(a.processes) == {"m0", "m1"}


def test_a_value_accepted_and_rejected() -> None:
    """Both confirmed: at most one terminal acknowledgement per record. (Delivered again
    after the ACCEPT, too.)"""
    ops = clean()
    ops.insert(-2, poll("m1", 30.0, ("s-0", 0, "a", 2)))
    ops.insert(-2, ack("m1", 30.1, "ok", ("s-0", 0, "a", 2, "reject")))
    ops[-1]["records"].append(["a", "s-0", 0, 2, "rejected"])
    assert kinds(ops) == {"acknowledged_twice": 1, "delivered_after_accept": 1,
                          "accepted_and_dead_lettered": 1}


def test_a_delivery_after_an_accept_whose_release_failed() -> None:
    """Handed out again after its ACCEPT was confirmed, even though the later holder's
    acknowledgement was refused."""
    ops = clean()
    ops.insert(-2, poll("m1", 30.0, ("s-0", 0, "a", 2)))
    ops.insert(-2, ack("m1", 30.1, "fail", ("s-0", 0, "a", 2, "release")))
    assert kinds(ops) == {"delivered_after_accept": 1}


def test_a_stale_prefetched_delivery_with_a_lower_count_is_not_a_finding() -> None:
    """m1's client fetched b at delivery 1 before m0 got delivery 2; its application saw it
    late and its RELEASE was refused (the lock had expired): no claim can be made."""
    ops = clean()
    ops.insert(-2, poll("m1", 30.0, ("s-0", 1, "b", 1)))
    ops.insert(-2, ack("m1", 30.1, "fail", ("s-0", 1, "b", 1, "release"),
                       error="INVALID_RECORD_STATE"))
    assert kinds(ops) == {}


def test_a_delivery_count_that_went_down() -> None:
    """d released at delivery 2 (confirmed), then delivered at 2 again, and that release
    confirmed as well: two live acquisitions with one count."""
    ops = clean()
    i = next(k for k, op in enumerate(ops) if op["op"] == "share_poll" and op["time"] == 3.0)
    ops[i]["records"][0] = ["s-1", 0, "d", 2]
    ops[i + 1]["acks"][0] = ["s-1", 0, "d", 2, "release"]
    assert kinds(ops) == {"delivery_count_went_down": 1}


def test_a_delivery_past_the_limit() -> None:
    ops = clean()
    ops.insert(-2, poll("m1", 30.0, ("s-1", 0, "d", 4)))
    ops.insert(-2, ack("m1", 30.1, "ok", ("s-1", 0, "d", 4, "release")))
    assert kinds(ops) == {"delivered_past_limit": 1}


def test_a_confirmed_reject_missing_from_the_dlq() -> None:
    ops = clean()
    ops[-1]["records"] = [r for r in ops[-1]["records"] if r[0] != "c"]
    assert kinds(ops) == {"dlq_missing": 1}
    [a] = check_share(ops).anomalies
    assert a.values == ("c",) and "REJECT" in a.detail


def test_a_release_at_the_limit_missing_from_the_dlq_even_if_refused() -> None:
    """A release at the last delivery: confirmed or refused (the lock expired, or the broker
    died), the record is archived at the limit either way."""
    ops = clean()
    ops[-1]["records"] = [r for r in ops[-1]["records"] if r[0] != "d"]
    assert kinds(ops) == {"dlq_missing": 1}
    i = next(k for k, op in enumerate(ops) if op["op"] == "share_ack" and op["time"] == 3.1)
    ops[i]["status"] = "info"
    assert kinds(ops) == {"dlq_missing": 1}


def test_a_delivery_at_the_limit_never_acknowledged_must_be_dead_lettered() -> None:
    """The consumer went away holding d at its last delivery (an abandoned batch): its lock
    ends with the session, and the record is archived at the limit."""
    ops = clean()
    i = next(k for k, op in enumerate(ops) if op["op"] == "share_ack" and op["time"] == 3.1)
    del ops[i]
    assert kinds(ops) == {}
    ops[-1]["records"] = [r for r in ops[-1]["records"] if r[0] != "d"]
    assert kinds(ops) == {"dlq_missing": 1}
    assert "never acknowledged" in check_share(ops).anomalies[0].detail


def test_an_accept_of_unknown_outcome_at_the_limit_may_or_may_not_be_dead_lettered() -> None:
    ops = clean()
    i = next(k for k, op in enumerate(ops) if op["op"] == "share_ack" and op["time"] == 3.1)
    ops[i] = ack("m0", 3.1, "info", ("s-1", 0, "d", 3, "accept"), error="_TIMED_OUT")
    assert kinds(ops) == {}  # in the DLQ: the accept was not written
    ops[-1]["records"] = [r for r in ops[-1]["records"] if r[0] != "d"]
    r = check_share(ops)
    assert r.valid and r.stats["share_values_outcome_unknown"] == 1  # ... or it was


def test_an_accepted_value_in_the_dlq() -> None:
    ops = clean()
    ops[-1]["records"].append(["a", "s-0", 0, 1, "rejected"])
    k = kinds(ops)
    assert k == {"accepted_and_dead_lettered": 1}


def test_dead_letters_without_a_reason() -> None:
    ops = clean()
    ops.insert(1, send("f", 4))
    ops.insert(-2, poll("m1", 30.0, ("s-0", 4, "f", 1)))
    ops.insert(-2, ack("m1", 30.1, "fail", ("s-0", 4, "f", 1, "accept")))
    # rejected, but nobody rejected it
    ops[-1]["records"].append(["f", "s-0", 4, 1, "rejected"])
    assert kinds(ops) == {"dlq_unexpected": 1}
    # the limit reason below the limit
    ops[-1]["records"][-1] = ["f", "s-0", 4, 2, LIMIT_REASON]
    assert kinds(ops) == {"dlq_unexpected": 1}
    ops[-1]["records"][-1] = ["f", "s-0", 4, 3, "gremlins"]
    assert kinds(ops) == {"dlq_unexpected": 1}
    ops[-1]["records"][-1] = ["f", "s-0", 4, 3, LIMIT_REASON]  # unseen acquisitions
    assert kinds(ops) == {}


def test_a_dlq_copy_of_a_value_never_sent_or_from_elsewhere() -> None:
    ops = clean()
    ops[-1]["records"].append(["ghost", "s-0", 7, 3, LIMIT_REASON])
    assert kinds(ops) == {"share_never_sent": 1}
    ops = clean()
    ops[-1]["records"][0] = ["c", "s-1", 2, 1, "rejected"]
    assert kinds(ops) == {"share_wrong_position": 1}


def test_a_dlq_duplicate_is_its_own_kind() -> None:
    ops = clean()
    ops[-1]["records"].append(["d", "s-1", 0, 3, LIMIT_REASON])
    assert kinds(ops) == {"dlq_duplicate": 1}


def test_dlq_contents_are_judged_only_after_a_final_read() -> None:
    ops = [op for op in clean() if op["op"] != "share_dlq"]
    r = check_share(ops)
    assert r.valid and r.stats["dlq_records"] == -1


def test_malformed_share_ops_are_history_errors() -> None:
    for bad in (
        ack("m9", 5.0, "ok", ("s-0", 0, "a", 1, "accept")),  # no such delivery
        ack("m0", 5.0, "maybe", ("s-0", 0, "a", 1, "accept")),
        {"op": "share_poll", "process": "m0", "time": 1.0, "records": [["s-0", 0, "a"]]},
        {"op": "share_poll", "process": "m0", "records": []},  # no time
        {"op": "share_frobnicate", "time": 1.0},
    ):
        ops = clean()
        ops.insert(-2, copy.deepcopy(bad))
        with pytest.raises(HistoryError):
            check_share(ops)


def test_the_generic_checker_and_the_share_checker_together() -> None:
    """The runner gives the generic checker the history without the share ops (the share
    topic's sends are checked against final reads like any other) and merges both."""
    ops = clean()
    generic = [op for op in ops if not is_share_op(op)]
    generic.append({"op": "reset", "process": "final", "final": True,
                    "partitions": ["s-0", "s-1"]})
    generic.append({"op": "poll", "process": "final", "final": True, "records": [
        ["s-0", 0, "a"], ["s-0", 1, "b"], ["s-0", 2, "c"], ["s-1", 0, "d"], ["s-1", 1, "e"]]})
    ops[-1]["records"].append(["a", "s-0", 0, 1, "rejected"])
    r = merge_results(check(generic, final_reads=True), check_share(ops))
    assert r.counts == {"accepted_and_dead_lettered": 1}
    assert r.stats["sends_acked"] == 5 and r.stats["share_sends_acked"] == 5
    assert not r.valid


def test_kind_names_are_unique_and_disjoint_from_the_generic_ones() -> None:
    from yak.chaos.anomalies import ANOMALY_KINDS

    assert len(set(SHARE_ANOMALY_KINDS)) == len(SHARE_ANOMALY_KINDS)
    assert not set(SHARE_ANOMALY_KINDS) & set(ANOMALY_KINDS)
