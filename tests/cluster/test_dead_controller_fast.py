"""Issue 27, a killed controller, on a real 3-broker cluster (etcd, `yak serve` processes,
librdkafka) at Yak's default settings (9 s sessions).

The other brokers probe the active controller as the controller probes them
(yak/cluster/liveness.py): when its process is gone (its listener refuses connections
after its connection closed), one of them revokes its session lease, the controller key
goes with it, and the next controller is elected through etcd, well before the 9 s
session would have run out. The partition the killed controller led takes writes again on
a new leader, and nothing acknowledged is lost.

A controller paused (SIGSTOP) for less than `broker.liveness.unresponsive.ms` (2 s) still
accepts connections in its kernel and answers the pings when it resumes: nobody fences it,
and it is still the controller after SIGCONT (a longer freeze: tests/cluster/test_liveness_pause.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.cluster.test_dead_leader_fast import Writer, _log, _metadata, _read_back, _start, _wait


def _led_by(cluster, node: int) -> int:  # type: ignore[no-untyped-def]
    """A partition `node` leads."""
    _controller, parts = _metadata(cluster)
    for p in sorted(parts):
        if parts[p][0] == node:
            return p
    raise AssertionError(f"broker {node} leads no partition: {parts}")


def test_a_killed_controller_is_replaced_before_its_session_expires(tmp_path: Path) -> None:
    cluster = _start(tmp_path)
    writer: Writer | None = None
    try:
        _wait(lambda: _metadata(cluster)[0] > 0, 30, "a controller")
        controller = _metadata(cluster)[0]
        others = [n for n in cluster.brokers if n != controller]
        # a partition the controller leads, when it leads one (preferred leaders spread
        # them over the three brokers, so it usually does)
        try:
            partition: int | None = _led_by(cluster, controller)
        except AssertionError:
            partition = None
        if partition is not None:
            writer = Writer(cluster.bootstrap, partition)
            writer.start()
            _wait(lambda: writer.acked() >= 200, 30, "200 acknowledged writes")
        killed = time.monotonic()
        cluster.kill(controller)
        _wait(lambda: _metadata(cluster)[0] not in (-1, controller), 30,
              "another controller")
        took = time.monotonic() - killed
        print(f"\nkill -9 of controller {controller} -> new controller"
              f" {_metadata(cluster)[0]} seen after {took:.2f} s")
        fenced_by = [n for n in others if f"liveness: controller {controller}" in _log(cluster, n)]
        assert fenced_by, "no broker fenced the killed controller"
        # The session (9 s) did not do it: the probe's verdict did, well before.
        assert took < 6.0, f"new controller only {took:.2f} s after the kill"
        if writer is not None and partition is not None:
            _wait(lambda: writer.first_ack_sent_after(killed) is not None, 30,
                  "an ack of a write sent after the kill")
            first = writer.first_ack_sent_after(killed)
            assert first is not None
            print(f"partition {partition} led by the controller -> first ack after"
                  f" {first - killed:.2f} s")
            target = writer.acked() + 100
            _wait(lambda: writer.acked() >= target, 30, "100 more acks on the new leader")
            writer.stop.set()
            writer.join(90)
        cluster.start_broker(controller)
        _wait(lambda: all(len(isr) == 3 for _l, isr in _metadata(cluster)[1].values()),
              60, "the restarted broker back in every ISR")
        if writer is not None and partition is not None:
            acked = {v for _s, _a, v in writer.acks}
            missing = acked - _read_back(cluster.bootstrap, partition)
            assert not missing, f"{len(missing)} acknowledged writes lost: {sorted(missing)[:5]}"
    finally:
        if writer is not None:
            writer.stop.set()
            writer.join(30)
        cluster.stop()


def test_a_paused_controller_is_not_fenced_by_the_probe(tmp_path: Path) -> None:
    cluster = _start(tmp_path)
    controller = -1
    try:
        _wait(lambda: _metadata(cluster)[0] > 0, 30, "a controller")
        controller = _metadata(cluster)[0]
        cluster.pause(controller)
        time.sleep(1.0)  # the pause itself, under the 2 s unresponsive bound
        cluster.resume(controller)
        _wait(lambda: all(len(isr) == 3 for _l, isr in _metadata(cluster)[1].values()),
              60, "every ISR full after SIGCONT")
        for n in cluster.brokers:
            assert f"liveness: controller {controller}" not in _log(cluster, n)
        assert _metadata(cluster)[0] == controller, "the paused controller lost its term"
    finally:
        if controller > 0:
            cluster.resume(controller)
        cluster.stop()
