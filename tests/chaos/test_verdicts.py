"""yak/chaos/verdicts.py: every liveness fence of a run, attributed to a fault or needless.

The log lines below are copied from run G's broker logs (/work/chaos-long/run-de09899,
2026-11-27), only their timestamps moved; `test_the_formats_read_are_the_brokers_own` checks
the brokers' sources still write them, so a changed message breaks these tests rather than
silently counting nothing.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from yak.chaos import env, verdicts
from yak.chaos.report import summary_markdown
from yak.chaos.verdicts import POST_EXPIRED_S, POST_S, attribute_run, main

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 27, 16, 44, 0).timestamp()  # the runs' time 0, wall clock

FROZEN = ("WARNING yak.cluster.liveness: liveness: broker 3 (epoch 507) answered no ApiVersions"
          " for 2.06 s (bound 2.00 s; last answer 2.06 s ago; 76 answers to 78 pings on this"
          " connection; this prober's loop at most 60 ms late in the window, limit 500 ms; 3"
          " windows voided by its own lateness); 1 of the 1 other probed brokers answered"
          " within 1.00 s ([1]): 2 of 3 brokers agree: frozen; fenced (lease {lease} revoked)")
FROZEN_CONTROLLER = (
    "WARNING yak.cluster.liveness: liveness: controller 2 (broker epoch 1798, controller"
    " epoch 2226) answered no ApiVersions for 2.00 s (bound 2.00 s; last answer 2.75 s ago;"
    " 3 answers to 5 pings on this connection; this prober's loop at most 1 ms late in the"
    " window, limit 500 ms; 1 windows voided by its own lateness); suspected in etcd by"
    " brokers [1, 3]: 2 of 3 brokers agree: frozen; fenced (lease {lease} revoked)")
GONE = ("WARNING yak.cluster.liveness: liveness: broker 3 (epoch 671) refused 3 connections in"
        " 0.3 s after its connection closed: its process is gone; fenced (lease {lease}"
        " revoked)")
NOT_JUDGED = (
    "INFO yak.cluster.liveness: liveness: broker 3 (epoch 6) answered no ApiVersions for"
    " -1.69 s (bound 2.00 s; last answer -1.69 s ago; 40 answers to 40 pings on this"
    " connection; this prober's loop at most 0 ms late in the window, limit 500 ms; 7 windows"
    " voided by its own lateness); suspected in etcd by brokers [1]: 1 of 3 brokers are no"
    " majority; not judged")
WITHHELD = (
    "INFO yak.cluster.liveness: liveness: broker 3 (epoch 6) answered no ApiVersions for"
    " 2.00 s (bound 2.00 s; last answer 2.00 s ago; 40 answers to 48 pings on this"
    " connection; this prober's loop at most 3 ms late in the window, limit 500 ms; 0 windows"
    " voided by its own lateness); but it fetched from this broker (a partition led here)"
    " 0.01 s ago, within the bound 2.00 s: replicating, so alive; verdict withheld")
EXPIRED = "WARNING yak.cluster.lease: broker {node} session: lease {lease} lost: expired"
REVOKED = "WARNING yak.cluster.lease: broker {node} session: lease {lease} lost: gone (revoked)"
NOT_RENEWED = ("WARNING yak.cluster.lease: broker {node} session: etcd unreachable, lease"
               " {lease} not renewed: etcd /v3/lease/keepalive: no endpoint answered within"
               " 1.5s (http://10.213.166.253:63879: ConnectTimeout)")
READY = ("INFO yak.broker.broker: broker {node} ready in 5.19 s since process start: imports"
         " and building 2.44 s, built to start (handler imports) 0.07 s, metadata store 0.23 s,"
         " storage 1.50 s, other parts 0.00 s, listeners and registration 0.94 s\n"
         "Yak broker ready on 10.213.166.1:63869")  # printed: no timestamp of its own
LEADER = ("INFO yak.cluster.quorum_controller: {tp}: leader {old} -> {new} (epoch 6),"
          " isr [{isr}]")
CTRL_ISR = "INFO yak.cluster.quorum_controller: {tp}: isr [{isr}] (partition epoch {pe})"
ALTER = "INFO yak.cluster.alter_partition: {tp}: ISR [{old}] -> [{isr}] (partition epoch {pe})"


def stamp(t: float, jump: float = 0.0) -> str:
    """A log line's time for run time `t` (plus a faked clock's `jump`)."""
    d = datetime.fromtimestamp(T0 + t + jump)
    return d.strftime("%Y-%m-%d %H:%M:%S") + f",{d.microsecond // 1000:03d}"


def write_logs(tmp: Path, lines: dict[int, list[tuple[float, str]]],
               jumps: dict[int, list[tuple[float, float, float]]] | None = None) -> Path:
    """brokerN.log files under tmp/cluster/logs; `jumps`: broker -> (from, to, jump_s)."""
    logs = tmp / "cluster" / "logs"
    logs.mkdir(parents=True)
    for node, entries in lines.items():
        out = []
        for t, text in sorted(entries):
            j = next((js for a, b, js in (jumps or {}).get(node, []) if a <= t < b), 0.0)
            out.append(f"{stamp(t, j)} {text}\n")
        (logs / f"broker{node}.log").write_text("".join(out))
    return tmp / "cluster"


def fault(fid: int, kind: str, target: str, start: float, stop: float,
          victims: list[int] | None = None, **info: object) -> list[dict]:
    st = {"op": "nemesis", "fault": kind, "phase": "start", "id": fid, "target": target,
          "time": start, **info}
    if victims is not None:
        st["victims"] = victims
    return [st, {"op": "nemesis", "fault": kind, "phase": "stop", "id": fid, "target": target,
                 "time": stop}]


def test_a_pause_explains_its_frozen_verdict_and_an_unexplained_one_is_needless(
        tmp_path: Path) -> None:
    ops = fault(1, "pause", "broker3", 100.0, 109.0, [3])
    cluster = write_logs(tmp_path, {
        1: [(103.1, FROZEN.format(lease="3a46a21de4b55547")),
            # the same revoke, seen by a second prober: one fence
            (103.2, FROZEN.format(lease="3a46a21de4b55547")),
            (300.0, FROZEN.format(lease="3a46a21de4b556f3")),
            (301.0, NOT_JUDGED)],
        2: [(103.15, FROZEN.format(lease="3a46a21de4b55547"))],
        3: [(110.0, REVOKED.format(node=3, lease="3a46a21de4b55547"))]})
    v = attribute_run(cluster, ops, T0)
    assert v["expected"] == {"gone": 0, "frozen": 1, "expired": 0}
    assert v["expected_by_fault"] == {"frozen": {"pause": 1}}
    assert v["needless"] == {"gone": 0, "frozen": 1, "expired": 0}
    (f,) = v["needless_list"]
    assert (f["time"], f["prober"], f["target"], f["role"], f["kind"]) == (
        300.0, 1, 3, "broker", "frozen")
    assert f["evidence"].startswith("broker 3 (epoch 507) answered no ApiVersions for 2.06 s")
    assert f["evidence"].endswith("frozen; fenced (lease 3a46a21de4b556f3 revoked)")
    assert f["faults_in_force"] == []
    assert f["target_silent_s"] == 6.0  # broker 3 logged nothing in the 6 s before
    assert v["revokes_logged_by_target"] == 1


def test_a_verdict_withheld_by_a_fetch_is_counted_not_fenced(tmp_path: Path) -> None:
    cluster = write_logs(tmp_path, {1: [(200.0, WITHHELD)], 2: [(200.1, WITHHELD)]})
    v = attribute_run(cluster, [], T0)
    assert v["withheld"] == 2 and v["withheld_list"][0]["prober"] == 1
    assert v["withheld_list"][0]["evidence"].startswith("broker 3 (epoch 6) answered no")
    assert v["needless"] == v["expected"] == {"gone": 0, "frozen": 0, "expired": 0}
    assert any("withheld because the silent broker was still fetching" in line
               and ": 2." in line for line in verdicts.verdicts_markdown(v))


def test_the_window_around_a_fault(tmp_path: Path) -> None:
    """From PRE_S before the start to POST_S after the stop op (POST_EXPIRED_S for an
    expiry); a fault on another broker explains nothing."""
    ops = fault(1, "kill", "broker3", 50.0, 58.0, [3], recovered=5.2)
    ops += fault(2, "pause", "broker1", 200.0, 209.0, [1])
    cluster = write_logs(tmp_path, {1: [
        (49.5, GONE.format(lease="a1")),                       # 0.5 s before: expected
        (48.5, GONE.format(lease="a0")),                       # 1.5 s before: needless
        (58.0 + POST_S - 0.5, FROZEN.format(lease="a2")),      # expected
        (58.0 + POST_S + 0.5, FROZEN.format(lease="a3")),      # needless
        (205.0, GONE.format(lease="a4")),                      # broker 3, not the victim
    ], 3: [(58.0 + POST_EXPIRED_S - 0.5, EXPIRED.format(node=3, lease="a5")),
           (58.0 + POST_EXPIRED_S + 0.5, EXPIRED.format(node=3, lease="a6"))]})
    v = attribute_run(cluster, ops, T0)
    assert v["expected"] == {"gone": 1, "frozen": 1, "expired": 1}
    assert sorted(f["lease"] for f in v["needless_list"]) == ["a0", "a3", "a4", "a6"]
    (a4,) = [f for f in v["needless_list"] if f["lease"] == "a4"]
    assert a4["faults_in_force"] == ["pause broker1"]


def test_an_etcd_kill_explains_any_brokers_expiry_and_its_failed_renewals_are_shown(
        tmp_path: Path) -> None:
    ops = fault(1, "etcd-kill", "etcd2", 143.8, 150.0)
    cluster = write_logs(tmp_path, {
        2: [(146.0, EXPIRED.format(node=2, lease="b1")),
            (400.0, NOT_RENEWED.format(node=2, lease="b2")),
            (402.0, EXPIRED.format(node=2, lease="b2"))],
        # an etcd-kill does not stop a broker answering: a verdict then is needless
        1: [(147.0, FROZEN.format(lease="b3"))]})
    v = attribute_run(cluster, ops, T0)
    assert v["expected"] == {"gone": 0, "frozen": 0, "expired": 1}
    assert v["needless"] == {"gone": 0, "frozen": 1, "expired": 1}
    exp = next(f for f in v["needless_list"] if f["kind"] == "expired")
    assert (exp["time"], exp["target"], exp["prober"]) == (402.0, 2, None)
    assert exp["renewal_failures"] == [
        "etcd unreachable, lease b2 not renewed: etcd /v3/lease/keepalive: no endpoint"
        " answered within 1.5s (http://10.213.166.253:63879: ConnectTimeout)"]
    frz = next(f for f in v["needless_list"] if f["kind"] == "frozen")
    assert frz["faults_in_force"] == ["etcd-kill etcd2"]


def test_leader_changes_and_isr_shrinks_after_a_needless_fence(tmp_path: Path) -> None:
    """Counted within FOLLOW_S of the verdict, each change once though the leader's
    alter_partition and the controller's watch both log it; shrinks of the target before
    the verdict (its leaders' own fetch-silence judgement) are counted apart."""
    tp, tp2 = "chaos-queue-2", "__transaction_state-1"
    cluster = write_logs(tmp_path, {
        1: [(9.0, ALTER.format(tp=tp, old="1, 2, 3", isr="1, 2, 3", pe=0)),
            (9.5, ALTER.format(tp=tp, old="1, 2, 3", isr="1, 2", pe=1)),   # before: 3 out
            (9.6, ALTER.format(tp=tp, old="1, 2", isr="1, 2, 3", pe=2)),   # back in
            (10.0, FROZEN.format(lease="c1")),
            (11.0, ALTER.format(tp=tp, old="1, 2, 3", isr="1, 2", pe=3)),  # 3 out
            (15.0, ALTER.format(tp=tp, old="1, 2", isr="1", pe=4))],       # too late
        2: [(10.4, LEADER.format(tp=tp2, old=3, new=1, isr="1, 2")),
            (10.5, CTRL_ISR.format(tp=tp2, isr="1", pe=9)),                # 2 out, not 3
            (11.1, CTRL_ISR.format(tp=tp, isr="1, 2", pe=3))]})            # the same change
    v = attribute_run(cluster, [], T0)
    (f,) = v["needless_list"]
    assert (f["leader_changes"], f["isr_shrinks"], f["shrinks_before"]) == (1, 1, 1)
    assert (v["needless_leader_changes"], v["needless_isr_shrinks"]) == (1, 1)


def test_a_clock_fault_shifts_its_brokers_log_back(tmp_path: Path) -> None:
    """libfaketime moves broker 3's wall clock an hour back during the fault: its lines
    are read at their real times, so its expiry falls in its pause's window."""
    ops = fault(1, "clock", "broker3", 30.0, 37.0, [3], jump_s=-3600)
    ops += fault(2, "pause", "broker3", 33.0, 36.0, [3])
    cluster = write_logs(tmp_path, {3: [
        (20.0, READY.format(node=3)), (31.0, NOT_RENEWED.format(node=3, lease="d1")),
        (36.5, EXPIRED.format(node=3, lease="d1")), (40.0, READY.format(node=3))]},
        jumps={3: [(30.5, 37.0, -3600.0)]})
    v = attribute_run(cluster, ops, T0)
    assert v["expected"]["expired"] == 1 and v["needless_list"] == []


def test_without_a_recorded_time_zero_the_restarts_line_the_logs_up(tmp_path: Path) -> None:
    """A kill's stop op is written when its broker's log says "Yak broker ready on": those
    pairs give the logs' wall time at the history's time 0."""
    ops = fault(1, "kill", "broker3", 40.0, 47.3, [3], recovered=5.2)
    ops += fault(2, "bounce", "broker1", 90.0, 96.0, [1], recovered=5.0)
    cluster = write_logs(tmp_path, {
        1: [(1.0, READY.format(node=1)), (95.98, READY.format(node=1)),
            (41.0, GONE.format(lease="e1"))],
        3: [(1.1, READY.format(node=3)), (47.26, READY.format(node=3))]})
    v = attribute_run(cluster, ops)
    assert abs(v["t0_wall"] - T0) < 0.05
    assert v["t0_wall_source"].startswith("estimated from 2 restarts")
    assert v["expected"]["gone"] == 1


def test_the_report_carries_the_section(tmp_path: Path) -> None:
    cluster = write_logs(tmp_path, {1: [(10.0, FROZEN_CONTROLLER.format(lease="f1"))]})
    v = attribute_run(cluster, [], T0)
    (f,) = v["needless_list"]
    assert (f["role"], f["target"]) == ("controller", 2)
    md = "\n".join(verdicts.verdicts_markdown(v))
    assert "## Liveness fences" in md and "**Needless: gone 0, frozen 1, session expired 0**" in md
    assert "10.0 s: frozen controller 2 by 1" in md
    summary = {"valid": True, "anomalies_found": 0, "anomaly_counts": {},
               "availability_during_faults": None, "availability_outside_faults": None,
               "counts": {"operations": 0, "acked_writes_checked": 0, "faults_injected": 0,
                          "faults_by_kind": {}},
               "latency_ms": {"p50": None, "p99": None, "max": None}, "faults": [],
               "anomalies": [], "verdicts": v}
    assert "## Liveness fences" in summary_markdown(summary)
    del summary["verdicts"]
    assert "Liveness fences" not in summary_markdown(summary)
    assert verdicts.report_verdicts(tmp_path / "nowhere", [], None, None) == {
        "error": f"fences not attributed: {tmp_path / 'nowhere' / 'logs'}: no broker logs"}
    # a history this module cannot read (a clock fault's jump not a number) is said too
    bad = fault(1, "clock", "broker1", 1.0, 2.0, [1], jump_s="soon")
    assert verdicts.report_verdicts(cluster, bad, T0, None) == {
        "error": "fences not attributed: could not convert string to float: 'soon'"}
    untimed = [{"op": "nemesis", "fault": "kill", "phase": "start", "target": "broker1"}]
    assert verdicts.report_verdicts(cluster, untimed, T0, None) == {
        "error": "fences not attributed: KeyError: 'time'"}


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = write_logs(tmp_path, {1: [(10.0, GONE.format(lease="ab12"))]})
    (tmp_path / "history.json").write_text(json.dumps(fault(1, "kill", "broker3", 9.5, 16.0,
                                                            [3], recovered=5.0)))
    (tmp_path / "summary.json").write_text(json.dumps({"t0_wall": T0}))
    assert main([str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["expected"]["gone"] == 1
    assert cluster == tmp_path / "cluster"
    assert main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("yak chaos verdicts: ") and err.count("\n") == 1


def test_the_formats_read_are_the_brokers_own() -> None:
    """The messages above come from these format strings: a change here must change the
    module (and these lines) with it."""
    liveness = (REPO / "yak/cluster/liveness.py").read_text()
    assert "its process is gone; fenced (lease %x revoked)" in liveness
    assert "frozen; fenced (lease %x revoked)" in liveness
    assert '"liveness: %s %s' in liveness  # role, then "broker N (epoch E) ..."
    lease = (REPO / "yak/cluster/lease.py").read_text()
    assert '"%s: lease %x lost: %s"' in lease
    qc = (REPO / "yak/cluster/quorum_controller.py").read_text()
    assert '"%s-%d: leader %d -> %d (epoch %d), isr %s"' in qc
    assert '"%s-%d: isr %s (partition epoch %d)"' in qc
    ap = (REPO / "yak/cluster/alter_partition.py").read_text()
    assert '"%s-%d: ISR %s -> %s (partition epoch %d)"' in ap
    assert verdicts.READY_MARK == env.READY
    witness = (REPO / "yak/cluster/liveness_witness.py").read_text()
    assert verdicts.WITHHELD in witness
    assert '"liveness: broker %d (epoch %d) %s; %s"' in liveness


def test_changes_with_no_fault_in_force_are_counted_and_a_quiet_log_keeps_its_times(
        tmp_path: Path) -> None:
    """A no-fault run's ISR shrinks are all needless (issue 27's count), fenced or not. A
    log silent for 20 minutes is not a clock jump: its lines keep their times. Without a
    restart to line up, the run's first topic (created just after time 0) anchors it."""
    tp = "chaos-queue-2"
    created = ("INFO yak.cluster.cluster_topics: created topic chaos-queue: 4 partition(s),"
               " replicas [[2, 3, 1], [3, 1, 2], [1, 2, 3], [2, 1, 3]]")
    ops = fault(1, "reassign", "chaos-txn/3 1,3,2->3,1,2", 600.0, 601.0)
    cluster = write_logs(tmp_path, {1: [
        (0.05, created),
        (1200.0, ALTER.format(tp=tp, old="1, 2, 3", isr="1, 3", pe=1)),     # counted
        (1200.5, ALTER.format(tp=tp, old="1, 3", isr="1, 2, 3", pe=2)),     # an expansion
        (600.5, LEADER.format(tp=tp, old=1, new=2, isr="1, 2, 3")),         # the move's
        (1900.0, LEADER.format(tp=tp, old=2, new=1, isr="1, 2, 3"))]})      # after the end
    v = attribute_run(cluster, ops, None, 1800.0)
    assert v["t0_wall_source"].startswith("estimated from the first topic's creation")
    assert abs(v["t0_wall"] - (T0 + 0.05)) < 1e-3
    assert v["outside_faults"] == {"leader_changes": 0, "isr_shrinks": 1}
