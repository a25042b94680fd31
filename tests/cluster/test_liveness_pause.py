"""Issue 27 on a real 3-broker cluster (etcd, `yak serve` processes, librdkafka), at Yak's
default settings (9 s sessions, `broker.liveness.unresponsive.ms` 2000): a FROZEN leader
(SIGSTOP) is replaced well before its session expires, because the controller's liveness
probe pings it on its connection and fences it once it has answered nothing for the bound
(yak/cluster/liveness_pings.py). Without that, the first ack after the pause comes only
after the 9 s session (plus etcd's expiry check), so the bound below (6 s) fails.

On SIGCONT the broker finds its lease gone, registers again, catches up and rejoins every
ISR; every acknowledged write reads back.

The client: a frozen broker's connections raise no error, so librdkafka learns of the new
leader only from a metadata refresh, and it sends its Metadata requests down an open
connection, often the frozen broker's, where they hang for `socket.timeout.ms` (60 s by
default; its periodic refresh comes every 5 min). At those defaults a producer of the
frozen leader waits its timeouts whatever the cluster does (measured: no ack for 35 s even
with a 1 s refresh). This test's producer refreshes every second and gives up on a request
after 3 s (`socket.timeout.ms`; the chaos tool's admin client uses the same), as a client
that must ride out a frozen leader has to; with that and without the frozen verdict, the
new leader exists only after the 9 s session, so the bound below fails.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.cluster.test_dead_leader_fast import (
    Writer,
    _log,
    _metadata,
    _read_back,
    _start,
    _victim,
    _wait,
)

BOUND_S = 6.0  # the goal is about 3 s; 9 s is the session this must beat
CLIENT = {"topic.metadata.refresh.interval.ms": 1000, "socket.timeout.ms": 3000}


class RefreshingWriter(Writer):
    """`Writer` (idempotent, acks=all, one partition, every 10 ms) whose producer also
    refreshes its metadata every second and times requests out after 3 s (`CLIENT`)."""

    client = CLIENT


def test_a_frozen_leader_is_replaced_before_its_session_expires(tmp_path: Path) -> None:
    cluster = _start(tmp_path)
    writer: RefreshingWriter | None = None
    victim = -1
    try:
        partition, victim, controller = _victim(cluster)
        registered = f"broker {victim} registered, epoch"
        assert _log(cluster, victim).count(registered) == 1
        writer = RefreshingWriter(cluster.bootstrap, partition)
        writer.start()
        _wait(lambda: writer.acked() >= 200, 30, "200 acknowledged writes")
        # The probe judges only a broker that answered its pings once.
        _wait(lambda: f"liveness: probing broker {victim} " in _log(cluster, controller)
              and "a pinged connection" in _log(cluster, controller), 30,
              "the controller's probe pinging the victim")
        time.sleep(1.0)  # a few answers on that connection
        paused = time.monotonic()
        cluster.pause(victim)
        _wait(lambda: writer.first_ack_sent_after(paused) is not None, 30,
              "an ack of a write sent after the pause")
        first = writer.first_ack_sent_after(paused)
        assert first is not None
        took = first - paused
        verdicts = [line for line in _log(cluster, controller).splitlines()
                    if f"liveness: broker {victim}" in line and "frozen" in line]
        print(f"\nSIGSTOP of broker {victim} (leader of partition {partition}, controller"
              f" {controller}) -> first ack: {took:.2f} s; verdict: {verdicts}")
        assert took < BOUND_S, f"first ack {took:.2f} s after the pause"
        assert len(verdicts) == 1, verdicts
        assert _metadata(cluster)[1][partition][0] not in (victim, -1)
        target = writer.acked() + 100
        _wait(lambda: writer.acked() >= target, 30, "100 more acks on the new leader")
        cluster.resume(victim)
        # SIGCONT: it learns its lease is gone, registers anew, catches up, rejoins.
        _wait(lambda: _log(cluster, victim).count(registered) == 2, 60,
              "the resumed broker registered again")
        _wait(lambda: all(len(isr) == 3 for _l, isr in _metadata(cluster)[1].values()),
              60, "the resumed broker back in every ISR")
        target = writer.acked() + 100
        _wait(lambda: writer.acked() >= target, 30, "100 more acks after the rejoin")
        writer.stop.set()
        writer.join(90)
        assert not writer.is_alive()
        acked = {v for _s, _a, v in writer.acks}
        missing = acked - _read_back(cluster.bootstrap, partition)
        assert not missing, f"{len(missing)} acknowledged writes lost: {sorted(missing)[:5]}"
    finally:
        if victim > 0:
            cluster.resume(victim)
        if writer is not None:
            writer.stop.set()
            writer.join(30)
        cluster.stop()


def test_a_frozen_controller_is_replaced_by_the_other_brokers(tmp_path: Path) -> None:
    """The other brokers ping the active controller too: a frozen controller is fenced by
    one of them, the next controller is elected through etcd, and the partition it led (if
    any) takes writes on a new leader, all before the 9 s session."""
    cluster = _start(tmp_path)
    writer: RefreshingWriter | None = None
    controller = -1
    try:
        _wait(lambda: _metadata(cluster)[0] > 0, 30, "a controller")
        controller, parts = _metadata(cluster)
        led = [p for p, (leader, _isr) in sorted(parts.items()) if leader == controller]
        others = [n for n in cluster.brokers if n != controller]
        _wait(lambda: all("a pinged connection" in _log(cluster, n)
                          and f"liveness: probing broker {controller} " in _log(cluster, n)
                          for n in others), 30, "every other broker pinging the controller")
        if led:
            writer = RefreshingWriter(cluster.bootstrap, led[0])
            writer.start()
            _wait(lambda: writer.acked() >= 200, 30, "200 acknowledged writes")
        time.sleep(1.0)
        paused = time.monotonic()
        cluster.pause(controller)

        def verdict() -> bool:
            return any(f"liveness: controller {controller}" in line and "frozen" in line
                       for n in others for line in _log(cluster, n).splitlines())
        _wait(verdict, 30, "a frozen verdict on the controller")
        judged = time.monotonic() - paused
        took = None
        if writer is not None:
            _wait(lambda: writer.first_ack_sent_after(paused) is not None, 30,
                  "an ack of a write sent after the pause")
            first = writer.first_ack_sent_after(paused)
            assert first is not None
            took = first - paused
        print(f"\nSIGSTOP of controller {controller} (leading {led}) -> verdict seen"
              f" {judged:.2f} s, first ack {took} s")
        assert judged < BOUND_S, f"verdict {judged:.2f} s after the pause"
        if took is not None:
            assert took < BOUND_S, f"first ack {took:.2f} s after the pause"
        cluster.resume(controller)
        _wait(lambda: _metadata(cluster)[0] not in (controller, -1)
              and all(len(isr) == 3 for _l, isr in _metadata(cluster)[1].values()), 60,
              "a new controller, and the resumed broker back in every ISR")
        if writer is not None:
            writer.stop.set()
            writer.join(90)
            acked = {v for _s, _a, v in writer.acks}
            missing = acked - _read_back(cluster.bootstrap, led[0])
            assert not missing, f"{len(missing)} acknowledged writes lost"
    finally:
        if controller > 0:
            cluster.resume(controller)
        if writer is not None:
            writer.stop.set()
            writer.join(30)
        cluster.stop()
