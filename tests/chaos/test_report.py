"""The report's figures on hand-made histories (availability, outage, recovery), its files,
and the nemesis's bookkeeping (fault names, schedules with overlapping faults, healing)
against a stand-in for the cluster: what is checked here is the nemesis's own logic;
real brokers are attacked in test_chaos_run.py."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from yak.chaos.checker import check
from yak.chaos.faults import FAULTS, FaultPlan, Nemesis, parse_faults
from yak.chaos.history import Recorder, load_history
from yak.chaos.report import analyse, write_report


def queue_history(gap: tuple[float, float] = (10.0, 15.0)) -> list[dict[str, Any]]:
    """Two partitions acked every 0.1 s for 30 s; partition a acks nothing during `gap`
    (writes sent then are acked when it ends); a fault from 10 s, undone at 13 s."""
    ops: list[dict[str, Any]] = []
    n = 0
    for k in range(300):
        t = k / 10
        for p in ("a", "b"):
            n += 1
            ack = t
            if p == "a" and gap[0] <= t < gap[1]:
                ack = gap[1]
            ops.append({"op": "send", "process": "q", "partition": p, "value": n,
                        "status": "ok", "offset": n, "sent": t, "time": ack})
    ops.append({"op": "nemesis", "fault": "kill", "phase": "start", "id": 1,
                "target": "broker1", "time": 10.0})
    ops.append({"op": "nemesis", "fault": "kill", "phase": "stop", "id": 1,
                "target": "broker1", "undo_at": 12.0, "recovered": 1.0, "time": 13.0})
    ops.sort(key=lambda o: o["time"])
    return ops


def test_availability_outage_and_recovery() -> None:
    a = analyse(queue_history())
    (f,) = a["faults"]
    assert f["fault"] == "kill" and f["held_s"] == 2.0 and f["recovered"] == 1.0
    assert f["outage_s"] == pytest.approx(5.0, abs=0.01)  # 9.9 -> 15.0, counted from 10
    assert f["recovery_s"] == pytest.approx(2.0, abs=0.01)  # undone at 13, a acks at 15
    # during the fault (seconds 10, 11, 12) a never acked, b always did
    assert a["availability_during_faults"] == pytest.approx(0.5)
    # outside: a is idle in seconds 13 and 14 only
    assert a["availability_outside_faults"] == pytest.approx(1 - 2 / (2 * 27), abs=1e-3)
    assert a["latency_ms"]["max"] == pytest.approx(5000, abs=1)
    assert len(a["series"]["t"]) == 30 and a["series"]["acked_per_s"][0] == 20


def test_writes_that_never_stopped_recover_at_once() -> None:
    a = analyse(queue_history(gap=(0.0, 0.0)))
    assert a["faults"][0]["recovery_s"] == 0.0
    assert a["faults"][0]["outage_s"] == pytest.approx(0.1, abs=0.01)
    assert a["availability_during_faults"] == 1.0


def with_leaders(ops: list[dict[str, Any]], leaders: dict[str, int] | None,
                 victims: list[int] | None, fault_id: int = 1) -> list[dict[str, Any]]:
    """The history with who led each partition recorded on fault `fault_id`'s start, as the
    nemesis does (a Metadata read just before the fault)."""
    out = []
    for op in ops:
        if op["op"] == "nemesis" and op["phase"] == "start" and op["id"] == fault_id \
                and leaders is not None:
            op = {**op, "leaders": leaders, "victims": victims}
        out.append(op)
    return out


def test_outage_and_availability_split_by_the_victims_partitions() -> None:
    """Partition a stalls 10-15 s, b never does. With broker1 (the victim) leading a, the
    victim-led figures are a's and the others b's; with broker2 the victim, the reverse."""
    a = analyse(with_leaders(queue_history(), {"a": 1, "b": 2}, [1]))
    (f,) = a["faults"]
    assert f["victim_led"] == ["a"] and f["victims"] == [1]
    assert f["outage_s"] == pytest.approx(5.0, abs=0.01)
    assert f["outage_victim_led_s"] == pytest.approx(5.0, abs=0.01)
    assert f["outage_others_s"] == pytest.approx(0.1, abs=0.01)
    assert a["availability_during_faults"] == pytest.approx(0.5)
    assert a["availability_during_faults_victim_led"] == 0.0
    assert a["availability_during_faults_others"] == 1.0
    assert a["fault_partition_seconds"] == {"victim_led": 3.0, "others": 3.0, "unknown": 0.0}

    a = analyse(with_leaders(queue_history(), {"a": 1, "b": 2}, [2]))
    (f,) = a["faults"]
    assert f["victim_led"] == ["b"]
    assert f["outage_victim_led_s"] == pytest.approx(0.1, abs=0.01)
    assert f["outage_others_s"] == pytest.approx(5.0, abs=0.01)
    assert a["availability_during_faults_victim_led"] == 1.0
    assert a["availability_during_faults_others"] == 0.0

    # the victim led nothing (or no broker was the victim: etcd-kill): all are others
    a = analyse(with_leaders(queue_history(), {"a": 2, "b": 2}, []))
    (f,) = a["faults"]
    assert f["victim_led"] == [] and f["outage_victim_led_s"] is None
    assert f["outage_others_s"] == pytest.approx(5.0, abs=0.01)
    assert a["availability_during_faults_victim_led"] is None
    assert a["availability_during_faults_others"] == pytest.approx(0.5)


def test_split_with_overlapping_faults_and_unknown_leaders() -> None:
    """A second fault (broker2, leader of b) inside the first makes b's second 11
    victim-led; a third fault whose leaders were not recorded counts in the total only."""
    ops = with_leaders(queue_history(), {"a": 1, "b": 2}, [1])
    ops += [{"op": "nemesis", "fault": "pause", "phase": "start", "id": 2, "target": "broker2",
             "time": 11.0, "leaders": {"a": 1, "b": 2}, "victims": [2]},
            {"op": "nemesis", "fault": "pause", "phase": "stop", "id": 2, "target": "broker2",
             "time": 12.0},
            {"op": "nemesis", "fault": "kill", "phase": "start", "id": 3, "target": "broker3",
             "time": 20.0},
            {"op": "nemesis", "fault": "kill", "phase": "stop", "id": 3, "target": "broker3",
             "time": 22.0}]
    ops.sort(key=lambda o: o["time"])
    a = analyse(ops)
    f1, f2, f3 = a["faults"]
    assert f1["victim_led"] == ["a"] and f2["victim_led"] == ["b"] and f3["victim_led"] is None
    assert f3["outage_victim_led_s"] is None and f3["outage_others_s"] is None
    assert f2["outage_victim_led_s"] == pytest.approx(0.1, abs=0.01)
    assert f2["outage_others_s"] == pytest.approx(4.0, abs=0.01)  # a: from 11 to 15
    # victim-led cells: a at 10, 11, 12 (down), b at 11 (up); others: b at 10 and 12 (up)
    assert a["fault_partition_seconds"] == {"victim_led": 4.0, "others": 2.0, "unknown": 4.0}
    assert a["availability_during_faults_victim_led"] == pytest.approx(0.25)
    assert a["availability_during_faults_others"] == 1.0
    # the total keeps every cell in a fault: 3 of 6 in fault 1, 4 of 4 in fault 3
    assert a["availability_during_faults"] == pytest.approx(7 / 10)


def test_report_files(tmp_path: Path) -> None:
    ops = queue_history()
    ops.append({"op": "reset", "process": "final", "final": True, "partitions": ["a", "b"],
                "time": 31.0})
    ops.append({"op": "poll", "process": "final", "final": True, "isolation": "read_committed",
                "records": [[o["partition"], o["offset"], o["value"]]
                            for o in ops if o["op"] == "send"][:-1], "time": 32.0})
    result = check(ops, final_reads=True)
    assert result.counts == {"lost_write": 1}
    replicas = {"partitions": 2, "identical": 2, "replicas": 6, "committed_bytes": 1234,
                "differ": []}
    s = write_report(tmp_path, ops, result, {"title": "t", "duration_s": 30.0, "errors": [],
                                             "replicas": replicas})
    assert not s["valid"] and s["anomaly_counts"] == {"lost_write": 1}
    assert s["counts"]["acked_writes_checked"] == 600 and s["counts"]["faults_injected"] == 1
    for name in ("history.json", "summary.json", "summary.md", "timeline.png",
                 "timeline.html"):
        assert (tmp_path / name).stat().st_size > 100, name
    assert load_history(tmp_path / "history.json") == ops
    assert json.loads((tmp_path / "summary.json").read_text())["valid"] is False
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "timeline.html").read_text()
    assert "<svg" in page and "<script" not in page and "http" not in page.replace(
        "http://www.w3.org/2000/svg", "")
    md = (tmp_path / "summary.md").read_text()
    assert "**FAIL**" in md and "lost_write" in md and "| kill | broker1 |" in md
    assert "| replicas identical below the high watermark (partitions, after healing) | 2 of 2" \
        in md
    assert "**Availability during faults: 50.0 %**" in md and "n/a / n/a" in md  # no leaders
    assert "| 1 | kill | broker1 | 10.0 | 2.0 | n/a | 5.0 | n/a | n/a |" in md
    # with the leaders recorded, the headline and the tables split victim-led and others
    s = write_report(tmp_path / "split", with_leaders(ops, {"a": 1, "b": 2}, [1]), result,
                     {"title": "t", "duration_s": 30.0, "errors": []})
    assert s["availability_during_faults_victim_led"] == 0.0
    assert s["faults"][0]["outage_others_s"] == pytest.approx(0.1, abs=0.01)
    md = (tmp_path / "split" / "summary.md").read_text()
    assert ("**Availability during faults: 50.0 %** (acks=all, partition-seconds): partitions"
            " led by the fault's victim 0.0 %, the other partitions 100.0 %") in md
    assert "| 1 | kill | broker1 | 10.0 | 2.0 | a | 5.0 | 5.0 | 0.1 | 2.0 | 1.0 |" in md
    assert "| kill | 1 | 5.0 | 5.0 | 0.1 | 2.0 |" in md  # per kind
    page = (tmp_path / "split" / "timeline.html").read_text()
    assert "led by the victim: 0.0 %" in page and "<td>a</td>" in page
    # G0 may be allowed (transactions across partitions), and is then shown, not failed
    s = write_report(tmp_path / "g0", ops[:-2], check(ops[:-2]),
                     {"allowed_anomalies": ["G0"], "errors": []})
    assert s["valid"] and s["allowed_anomaly_counts"] == {}
    # a fault skipped for want of a victim is listed, and does not fail the run
    skipped = "pause-leader: not started: no live leader of chaos-queue known (Metadata) for 30 s"
    s = write_report(tmp_path / "skip", ops[:-2], check(ops[:-2]),
                     {"allowed_anomalies": ["G0"], "errors": [],
                      "faults_not_started": [skipped]})
    assert s["valid"]
    md = (tmp_path / "skip" / "summary.md").read_text()
    assert "Faults skipped when drawn (no victim known in time; not errors):" in md
    assert f"- {skipped}" in md


def test_parse_faults() -> None:
    assert parse_faults("kill,pause-leader") == ["kill", "pause-leader"]
    assert parse_faults("all") == list(FAULTS)
    assert parse_faults("none") == []
    assert "partition-halves" in parse_faults("network,kill")
    with pytest.raises(ValueError, match="unknown fault 'explode'"):
        parse_faults("kill,explode")


class StandIn:
    """Records what the nemesis asks of the cluster (no processes)."""

    def __init__(self) -> None:
        from yak.chaos.env import ClusterSpec

        self.spec = ClusterSpec(Path("/nonexistent"), brokers=3, session_timeout_ms=1000)
        self.node_ids = [1, 2, 3]
        self.net = None
        self.etcd = None
        self.store = None  # no object store (the tiered runs' store faults need one)
        self.up = {1: True, 2: True, 3: True}
        self.paused: set[int] = set()
        self.leading = {0: 2, 1: 2}  # partition -> leader, as Metadata says
        self.calls: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def _log(self, what: str, n: int) -> None:
        with self.lock:
            self.calls.append((what, n))

    def broker_name(self, n: int) -> str:
        return f"broker{n}"

    def alive(self, n: int) -> bool:
        return self.up[n]

    def kill(self, n: int) -> None:
        self.up[n] = False
        self._log("kill", n)

    def start_broker(self, n: int) -> None:
        self.up[n] = True
        self._log("start", n)

    def pause(self, n: int) -> None:
        self.paused.add(n)
        self._log("pause", n)

    def resume(self, n: int) -> None:
        if n in self.paused:
            self.paused.discard(n)
            self._log("resume", n)

    def leaders(self, topic: str, timeout: float = 5.0) -> dict[int, int]:
        return dict(self.leading)

    def controller(self) -> int:
        return 3

    def heal(self) -> None:
        pass


def test_schedule_overlapping_faults_and_targets() -> None:
    c = StandIn()
    rec = Recorder()
    plan = FaultPlan(["kill", "pause"], schedule=[
        {"at": 0.0, "fault": "pause", "target": "broker3", "hold": 0.6},
        {"at": 0.1, "fault": "kill", "target": 1, "hold": 0.2},
        {"at": 0.1, "fault": "kill-leader", "hold": 0.2},
    ])
    nem = Nemesis(c, rec, plan)  # type: ignore[arg-type]
    nem.start()
    nem.join(10)
    assert not nem.is_alive() and not nem.errors
    # the pause lasts past the session (1.5 x 1 s), the kills overlap it
    assert ("pause", 3) in c.calls and ("kill", 1) in c.calls and ("kill", 2) in c.calls
    assert c.calls.index(("kill", 1)) < c.calls.index(("resume", 3))
    assert all(c.up.values()) and not c.paused
    starts = [o for o in rec.snapshot() if o["phase"] == "start"]
    stops = [o for o in rec.snapshot() if o["phase"] == "stop"]
    assert len(starts) == 3 == len(stops)
    assert {o["id"] for o in starts} == {o["id"] for o in stops}
    assert [o for o in starts if o["fault"] == "pause"][0]["hold"] == pytest.approx(1.5)


def test_the_nemesis_records_who_led_each_partition_when_a_fault_began() -> None:
    """The report's victim-led split rests on these: every leader (Metadata, read before the
    fault is applied) and the victims, on the start operation."""
    c = StandIn()
    c.leading = {0: 2, 1: 3}
    rec = Recorder()
    nem = Nemesis(c, rec, FaultPlan(["kill", "pause"], schedule=[  # type: ignore[arg-type]
        {"at": 0.0, "fault": "kill-leader", "hold": 0.1},
        {"at": 0.3, "fault": "pause", "target": "broker1", "hold": 0.1},
    ], topic="chaos-queue"))
    nem.start()
    nem.join(10)
    assert not nem.errors
    kill, pause = sorted((o for o in rec.snapshot() if o["phase"] == "start"),
                         key=lambda o: o["time"])
    assert kill["victims"] == [int(kill["target"].removeprefix("broker"))]
    assert kill["victims"][0] in (2, 3)  # a leader
    assert kill["leaders"] == {"chaos-queue-0": 2, "chaos-queue-1": 3}
    assert pause["victims"] == [1] and pause["leaders"] == kill["leaders"]
    by_id = analyse(rec.snapshot())["faults"]
    assert [f["victim_led"] for f in by_id] == [
        ["chaos-queue-0"] if kill["victims"] == [2] else ["chaos-queue-1"], []]

    # leaders that cannot be read: the fault still runs, the split is left out
    def no_metadata(topic: str, timeout: float = 5.0) -> dict[int, int]:
        raise RuntimeError("Metadata timed out")

    c = StandIn()
    c.leaders = no_metadata  # type: ignore[method-assign]
    rec = Recorder()
    nem = Nemesis(c, rec, FaultPlan(["kill"], schedule=[  # type: ignore[arg-type]
        {"at": 0.0, "fault": "kill", "target": 1, "hold": 0.1}]))
    nem.start()
    nem.join(10)
    (start,) = [o for o in rec.snapshot() if o["phase"] == "start"]
    assert ("kill", 1) in c.calls and "leaders" not in start and "victims" not in start


def test_stop_cuts_a_hold_short_and_heals() -> None:
    c = StandIn()
    rec = Recorder()
    nem = Nemesis(c, rec, FaultPlan(["kill"], interval=(0.01, 0.01), hold=(60, 60)))  # type: ignore[arg-type]
    nem.start()
    deadline = time.monotonic() + 5
    while not c.calls and time.monotonic() < deadline:
        time.sleep(0.01)  # back-off of this wait-for-first fault loop
    nem.stop()
    nem.join(5)
    assert not nem.is_alive()
    assert c.calls[0][0] == "kill" and c.calls[1] == ("start", c.calls[0][1])
    assert all(c.up.values())


def test_unsupported_faults_are_reported_not_dropped() -> None:
    c = StandIn()
    nem = Nemesis(c, Recorder(), FaultPlan(["kill", "partition", "slow", "disk-full", "clock"]))  # type: ignore[arg-type]
    assert nem.usable == ["kill"]
    assert set(nem.skipped) == {"partition", "slow", "disk-full", "clock"}
    assert all(nem.skipped.values())


def test_a_fault_on_the_controller_waits_for_one_to_be_elected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between controllers (an election after the previous fault) the nemesis asks again
    instead of failing the run at once; with none for TARGET_WAIT_S it is an error."""
    import yak.chaos.faults as faults

    c = StandIn()
    answers = iter([None, None, 2])
    c.controller = lambda: next(answers)  # type: ignore[attr-defined]
    nem = Nemesis(c, Recorder(), FaultPlan(["kill-controller"]))  # type: ignore[arg-type]
    assert nem._pick_target("kill-controller") == 2  # after two "none known" answers

    monkeypatch.setattr(faults, "TARGET_WAIT_S", 1.5)
    c.controller = lambda: None  # type: ignore[attr-defined]
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="no controller known .* for 1.5 s"):
        nem._pick_target("kill-controller")
    assert 1.4 < time.monotonic() - t0 < 5


def test_a_leader_fault_asks_again_when_metadata_cannot_be_read() -> None:
    """Run F: a `kill-leader` and a `pause-leader` failed the run because one Metadata
    read failed ("Broker transport failure", "Timed out") while the cluster failed over."""
    from confluent_kafka import KafkaError, KafkaException

    c = StandIn()
    answers: list[Any] = [KafkaException(KafkaError(KafkaError._TRANSPORT)), {0: -1, 1: -1},
                          {0: 1, 1: -1}]

    def leaders(topic: str, timeout: float = 5.0) -> dict[int, int]:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    c.leaders = leaders  # type: ignore[method-assign]
    nem = Nemesis(c, Recorder(), FaultPlan(["kill-leader"]))  # type: ignore[arg-type]
    assert nem._pick_target("kill-leader") == 1
    assert answers == []


def test_a_fault_without_a_known_victim_is_skipped_not_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import yak.chaos.faults as faults

    monkeypatch.setattr(faults, "TARGET_WAIT_S", 0.5)

    def no_metadata(topic: str, timeout: float = 5.0) -> dict[int, int]:
        raise RuntimeError("Failed to get metadata: Local: Timed out")

    c = StandIn()
    c.leaders = no_metadata  # type: ignore[method-assign]
    rec = Recorder()
    nem = Nemesis(c, rec, FaultPlan(["pause-leader"], schedule=[  # type: ignore[arg-type]
        {"at": 0.0, "fault": "pause-leader", "hold": 0.1}]))
    nem.start()
    nem.join(10)
    assert not nem.errors and not c.calls  # nothing paused, and the run has no error
    assert len(nem.not_started) == 1 and "Metadata unreadable" in nem.not_started[0]
    [op] = rec.snapshot()
    assert op["phase"] == "skipped" and op["fault"] == "pause-leader"


class StandInEtcd:
    """Three members; `leader()` fails `failures` times (no member answered in time)."""

    def __init__(self, failures: int, down: int = 0) -> None:
        from types import SimpleNamespace

        self.failures = failures
        self.members = [SimpleNamespace(name=f"etcd{i}", alive=i > down, killed=False)
                        for i in (1, 2, 3)]
        for m in self.members:
            m.is_alive = lambda m=m: m.alive
            m.kill = lambda m=m: setattr(m, "killed", True)

    def leader(self, timeout: float = 5.0) -> Any:
        from yak.devcluster.process import ClusterStateError

        if self.failures:
            self.failures -= 1
            raise ClusterStateError(f"no etcd leader within {timeout:g} s")
        return self.members[1]

    def restart_member(self, name: str) -> None:
        pass


def test_etcd_kill_waits_for_an_etcd_leader_then_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run F: two `etcd-kill`s failed the run with "no etcd leader within 5 s" on a
    machine at load 19; the victim is now looked for up to TARGET_WAIT_S, and a fault
    with none is skipped, as is one drawn while a member is still down."""
    import yak.chaos.faults as faults

    c = StandIn()
    c.etcd = StandInEtcd(failures=2)
    nem = Nemesis(c, Recorder(), FaultPlan(["etcd-kill"]))  # type: ignore[arg-type]
    assert nem._etcd_victim().name == "etcd2"

    monkeypatch.setattr(faults, "TARGET_WAIT_S", 0.5)
    c.etcd = StandInEtcd(failures=0, down=1)  # etcd1 not restarted yet
    with pytest.raises(faults.FaultSkipped, match="etcd1 not running"):
        nem._etcd_victim()
    c.etcd = StandInEtcd(failures=10**6)
    rec = Recorder()
    nem = Nemesis(c, rec, FaultPlan(["etcd-kill"], schedule=[  # type: ignore[arg-type]
        {"at": 0.0, "fault": "etcd-kill", "hold": 0.1}]))
    nem.start()
    nem.join(10)
    assert not nem.errors and nem.not_started
    assert not any(m.killed for m in c.etcd.members)
    assert [op["phase"] for op in rec.snapshot()] == ["skipped"]


def test_availability_stops_where_the_producers_stopped() -> None:
    """Seconds after the producers' last send (the run draining, reading back and healing)
    count neither way: a last nemesis operation long after them used to make every such
    second 'unavailable outside faults' (device pause run: 35.6 % outside, 2026-11-27)."""
    base = analyse(queue_history())
    ops = queue_history()
    ops.append({"op": "nemesis", "fault": "heal", "phase": "info", "id": 9, "time": 90.0})
    a = analyse(ops)
    assert a["availability_outside_faults"] == base["availability_outside_faults"]
    assert a["availability_during_faults"] == base["availability_during_faults"]
