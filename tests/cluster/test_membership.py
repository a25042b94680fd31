"""Broker registration and the live broker set against real etcd, including a broker process
paused (SIGSTOP) past its session: it must learn it lost its registration, and it must not
act as registered (acknowledge) at any moment after it resumes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.waiting import await_until, wait_until
from yak.cluster.etcd import EtcdClient, EtcdUnavailable
from yak.cluster.layout import ClusterKeys
from yak.cluster.membership import (
    BrokerRegistration,
    DuplicateBrokerRegistrationError,
    LiveBroker,
    LiveBrokers,
    RegistrationState,
)
from yak.cluster.records import BrokerEndpoint, RegisterBrokerRecord, decode
from yak.devcluster.local import LocalEtcd

from .conftest import run

REPO = Path(__file__).resolve().parents[2]


def record(node_id: int, incarnation: str = "i1", port: int = 9092) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(node_id, incarnation,
                                (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),), rack="r1")


def test_register_epoch_live_set_and_deregister(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            changes: list[tuple[set[int], set[int]]] = []
            live = LiveBrokers(c, keys, on_change=lambda b, a, r: changes.append((a, r)))
            await live.start()
            states: list[tuple[RegistrationState, int]] = []
            regs = [BrokerRegistration(c, keys, record(n, port=9000 + n),
                                       session_timeout_ms=3000, heartbeat_interval_ms=500,
                                       on_state=lambda s, e: states.append((s, e)))
                    for n in (1, 2)]
            for r in regs:
                await r.start()
                assert r.is_registered()
            kv = await c.get(keys.broker(1))
            assert kv is not None and regs[0].epoch == kv.create_revision
            assert regs[1].epoch > regs[0].epoch
            assert kv.lease == regs[0].lease.lease_id  # type: ignore[union-attr]
            assert decode(RegisterBrokerRecord, kv.value) == record(1, port=9001)
            await live.wait_for(lambda b: set(b) == {1, 2}, 5)
            assert live.brokers[2] == LiveBroker(record(2, port=9002), regs[1].epoch)
            assert live.brokers[2].record.end_points[0].port == 9002

            # registrations stay while renewed, well past the 3 s session (the sleep is the
            # point: the session's time passes)
            await asyncio.sleep(3.5)
            assert all(r.is_registered() for r in regs)
            assert set(live.brokers) == {1, 2}

            # update under the same epoch (e.g. entering controlled shutdown)
            upd = RegisterBrokerRecord(1, "i1", record(1).end_points, "r1",
                                       in_controlled_shutdown=True)
            assert await regs[0].update(upd)
            await live.wait_for(lambda b: b[1].record.in_controlled_shutdown, 5)
            assert live.brokers[1].epoch == regs[0].epoch

            await regs[0].stop()
            assert not regs[0].is_registered()
            assert await c.get(keys.broker(1)) is None
            await live.wait_for(lambda b: set(b) == {2}, 5)
            assert changes[-1] == (set(), {1})
            assert states[-1] == (RegistrationState.STOPPED, regs[0].epoch)
            await regs[1].stop()
            await live.stop()

    run(body())


def test_duplicate_node_id_refused_in_one_line(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            first = BrokerRegistration(c, keys, record(7, "first"), session_timeout_ms=3000,
                                       heartbeat_interval_ms=500)
            await first.start()
            second = BrokerRegistration(c, keys, record(7, "second"), session_timeout_ms=3000,
                                        heartbeat_interval_ms=500, register_timeout_s=1.0)
            t0 = time.monotonic()
            with pytest.raises(DuplicateBrokerRegistrationError) as e:
                await second.start()
            assert time.monotonic() - t0 < 4
            msg = str(e.value)
            assert "\n" not in msg and "node.id 7" in msg and "first" in msg
            # the refused one left nothing behind: the first still holds the key
            kv = await c.get(keys.broker(7))
            assert kv is not None and kv.create_revision == first.epoch

            # a restart waits for the previous incarnation to go, then registers
            third = BrokerRegistration(c, keys, record(7, "third"), session_timeout_ms=3000,
                                       heartbeat_interval_ms=500, register_timeout_s=10.0)
            task = asyncio.ensure_future(third.start())
            await asyncio.sleep(0.5)  # a window in which it must not register: not a wait
            assert not task.done()
            first.lease.suspend()  # type: ignore[union-attr]  # as if killed: lease expires
            await asyncio.wait_for(task, 10)
            assert third.is_registered() and third.epoch > first.epoch
            await third.stop()
            await first.stop()

    run(body())


def test_lost_lease_is_reported_then_registers_again(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            states: list[tuple[RegistrationState, int]] = []
            reg = BrokerRegistration(c, keys, record(3), session_timeout_ms=3000,
                                     heartbeat_interval_ms=300,
                                     on_state=lambda s, e: states.append((s, e)))
            await reg.start()
            epoch1 = reg.epoch
            await c.lease_revoke(reg.lease.lease_id)  # type: ignore[union-attr]
            await await_until(lambda: len(states) >= 3, 5,
                              "three states: registered, lost, registered again")
            assert states[0] == (RegistrationState.REGISTERED, epoch1)
            assert states[1] == (RegistrationState.LOST, epoch1)
            assert states[2][0] is RegistrationState.REGISTERED and states[2][1] > epoch1
            assert reg.is_registered() and reg.epoch == states[2][1]
            kv = await c.get(keys.broker(3))
            assert kv is not None and kv.create_revision == reg.epoch
            await reg.stop()

    run(body())


def test_expired_registration_leaves_the_live_set(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    """A broker that stops renewing (killed, frozen) disappears after its session."""
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            live = LiveBrokers(c, keys)
            await live.start()
            reg = BrokerRegistration(c, keys, record(4), session_timeout_ms=2000,
                                     heartbeat_interval_ms=500, rejoin=False)
            await reg.start()
            await live.wait_for(lambda b: 4 in b, 5)
            reg.lease.suspend()  # type: ignore[union-attr]
            t0 = time.monotonic()
            await live.wait_for(lambda b: 4 not in b, 10)
            gone_after = time.monotonic() - t0
            assert 1.0 < gone_after < 6.0, gone_after
            assert not reg.is_registered()  # the local deadline passed before etcd expired it
            await live.stop()
            await reg.stop()

    run(body())


PAUSED_BROKER = textwrap.dedent("""
    import asyncio, sys, time
    from yak.cluster.etcd import EtcdClient
    from yak.cluster.layout import ClusterKeys
    from yak.cluster.membership import BrokerRegistration
    from yak.cluster.records import RegisterBrokerRecord

    def out(line):
        sys.stdout.write(line + "\\n"); sys.stdout.flush()

    async def main():
        c = EtcdClient(sys.argv[1].split(","), timeout=2.0)
        reg = BrokerRegistration(
            c, ClusterKeys(sys.argv[2]), RegisterBrokerRecord(5, "paused"),
            session_timeout_ms=2000, heartbeat_interval_ms=300,
            on_state=lambda s, e: out(f"STATE {s.value} {e}"))
        await reg.start()
        while True:  # stands for the produce path: acknowledge only while registered
            if reg.is_registered():
                out(f"ACK {reg.epoch} {time.monotonic():.3f}")
            await asyncio.sleep(0.02)  # paces the stand-in produce path

    asyncio.run(main())
""")


def _proc_state(pid: int) -> str:
    """The one-letter state in /proc/PID/stat ("T" once SIGSTOP has taken effect)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def test_sigstop_past_session_is_fenced(etcd: LocalEtcd, keys: ClusterKeys,
                                        tmp_path: Path) -> None:
    out_path = tmp_path / "broker.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", PAUSED_BROKER, ",".join(etcd.endpoints), keys.namespace],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        def lines() -> list[str]:
            return out_path.read_text().splitlines()

        def acked() -> bool:
            assert proc.poll() is None, lines()
            return any(line.startswith("ACK") for line in lines())

        wait_until(acked, 15, "the first ACK")
        epoch1 = int(next(x for x in lines() if x.startswith("STATE registered")).split()[2])

        os.kill(proc.pid, signal.SIGSTOP)
        # Count its lines only once it is stopped: an epoch-1 ACK written after the count
        # would read as one written after resuming. Its writes are unbuffered (flushed per
        # line into a file), so a stopped process has nothing more on its way.
        wait_until(lambda: _proc_state(proc.pid) == "T", 5, "the process stopped")
        before = len(lines())

        async def gone() -> None:
            async with EtcdClient(etcd.endpoints) as c:
                async def absent() -> bool:
                    return await c.get(keys.broker(5)) is None

                await await_until(absent, 10, "etcd to expire broker 5's registration")

        run(gone(), 10)  # etcd expired the session while the process was frozen
        os.kill(proc.pid, signal.SIGCONT)

        def registered_again() -> bool:
            assert proc.poll() is None, lines()[before:]
            return any(x.startswith("STATE registered") for x in lines()[before:])

        wait_until(registered_again, 10, "a new registration after SIGCONT")
        after = lines()[before:]
        # Nothing was acknowledged under the old epoch after resuming, not even before the
        # first keepalive answered; the loss was reported, then a new, larger epoch.
        assert not [x for x in after if x.startswith(f"ACK {epoch1} ")], after
        assert f"STATE lost {epoch1}" in after
        epoch2 = int(next(x for x in after if x.startswith("STATE registered")).split()[2])
        assert epoch2 > epoch1
        wait_until(lambda: any(x.startswith(f"ACK {epoch2} ") for x in lines()[before:]), 5,
                   f"an ACK under the new epoch {epoch2}")
    finally:
        proc.kill()
        proc.wait(5)


def test_a_starved_event_loop_keeps_its_session(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    """The broker's loop blocked for twice the session timeout (log recovery on a saturated
    machine, docs/reliability.md finding 9) does not lose the registration: the renewals run
    on their own thread, as Kafka's broker heartbeats do. A frozen *process* still loses it
    (test_sigstop_past_session_is_fenced)."""
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            states: list[tuple[RegistrationState, int]] = []
            reg = BrokerRegistration(c, keys, record(6), session_timeout_ms=2000,
                                     heartbeat_interval_ms=300,
                                     on_state=lambda s, e: states.append((s, e)))
            await reg.start()
            epoch = reg.epoch
            time.sleep(4.5)  # blocks this loop: nothing else on it runs
            assert reg.is_registered()  # the local deadline was kept renewed meanwhile
            # A window for a lost-lease callback to come through, had there been one: the
            # point is that nothing arrives in it, so there is no condition to poll.
            await asyncio.sleep(0.5)
            assert states == [(RegistrationState.REGISTERED, epoch)]
            kv = await c.get(keys.broker(6))
            assert kv is not None and kv.create_revision == epoch
            assert await c.lease_ttl(reg.lease.lease_id) > 0  # type: ignore[union-attr]
            await reg.stop()
            assert await c.get(keys.broker(6)) is None

    run(body())


def test_registration_outlasts_an_etcd_silent_at_start(etcd_factory, keys: ClusterKeys) -> None:
    """Found in a 30-minute chaos run at load ~20: a restarted broker's lease grant met an
    etcd that answered nothing within one request budget, and the broker exited. A start
    now retries an unreachable etcd within `register_timeout_s`; a longer outage still
    fails the start."""
    e = etcd_factory(1)

    async def body() -> None:
        async with EtcdClient(e.endpoints, timeout=1.0) as c:
            reg = BrokerRegistration(c, keys, record(1), session_timeout_ms=3000,
                                     heartbeat_interval_ms=500, register_timeout_s=15)
            e.members[0].pause()
            t0 = time.monotonic()
            task = asyncio.create_task(reg.start())
            await asyncio.sleep(2.5)  # the point: two request budgets of silence
            assert not task.done()
            e.members[0].resume()
            await asyncio.wait_for(task, 15)
            assert reg.is_registered() and time.monotonic() - t0 >= 2.5
            await reg.stop()

            short = BrokerRegistration(c, keys, record(2), session_timeout_ms=3000,
                                       heartbeat_interval_ms=500, register_timeout_s=2)
            e.members[0].pause()
            try:
                with pytest.raises(EtcdUnavailable):
                    await short.start()
            finally:
                e.members[0].resume()

    asyncio.run(body())
