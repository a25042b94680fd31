"""The frozen-broker verdict's guards (yak/cluster/liveness_pings.py), on the pure judge and
on a real socket: a broker that never answered is never judged, a prober whose own loop was
late judges nothing, an answer resets the silence, and a listener that stops answering is
judged after the bound. And its second source (yak/cluster/liveness_quorum.py), on real
sockets and a real etcd: a prober that hears none of its peers judges none, one silent
while the other answers is judged, and a lone probe target's silence needs a second
broker's suspicion of the same registration."""

from __future__ import annotations

import asyncio
import struct

from yak.cluster.liveness_pings import FreezeJudge, api_versions_request, watch

BOUND = 2.0


def test_silence_after_an_answer_is_frozen_at_the_bound() -> None:
    j = FreezeJudge(BOUND, now=0.0)
    j.heard(0.1)
    for t in (0.35, 0.6, 1.0, 1.5, 2.0):
        j.tick(0.01, t)
        assert not j.frozen(t)
    j.tick(0.01, 2.1)
    assert j.frozen(2.1)
    assert "answered no ApiVersions for 2.00 s" in j.evidence(2.1)


def test_a_broker_that_never_answered_is_never_judged() -> None:
    j = FreezeJudge(BOUND, now=0.0)
    for i in range(1, 100):
        j.tick(0.0, i * 0.25)
        assert not j.frozen(i * 0.25)


def test_a_late_prober_judges_nothing() -> None:
    """A tick later than a quarter of the bound restarts the window: a prober starved
    every second (the whole host starved) never reaches a verdict."""
    j = FreezeJudge(BOUND, now=0.0)
    j.heard(0.0)
    t = 0.0
    for _ in range(40):  # 40 s of silence, with this prober 0.6 s late once a second
        for _ in range(3):
            t += 0.25
            j.tick(0.01, t)
            assert not j.frozen(t)
        t += 0.85
        j.tick(0.6, t)
        assert not j.frozen(t)
    assert j.voided == 40
    # Once it runs on time again, the silence counts from its last late tick.
    late = t
    while t < late + BOUND - 0.25:
        t += 0.25
        j.tick(0.01, t)
        assert not j.frozen(t)
    t += 0.25
    j.tick(0.01, t)
    assert j.frozen(t)


def test_lag_under_the_limit_does_not_void() -> None:
    j = FreezeJudge(BOUND, now=0.0)
    j.heard(0.0)
    j.tick(0.49, 1.0)  # under 0.5 s: this loop was slow, not starved
    assert j.voided == 0
    j.tick(0.0, 2.0)
    assert j.frozen(2.0)


async def _listener(answer: asyncio.Event) -> tuple[asyncio.Server, int, list[int]]:
    """A real TCP listener that answers ApiVersions frames while `answer` is set."""
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                key, _version, correlation = struct.unpack(">hhi", frame[:8])
                seen.append(key)
                if answer.is_set():
                    writer.write(struct.pack(">ii", 4, correlation))  # any frame will do
        except (asyncio.IncompleteReadError, OSError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


def test_watch_judges_a_listener_that_stops_answering() -> None:
    async def main() -> None:
        answer = asyncio.Event()
        answer.set()
        server, port, seen = await _listener(answer)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        loop = asyncio.get_running_loop()
        task = loop.create_task(watch(reader, writer, 0.8))
        await asyncio.sleep(1.0)
        assert not task.done()  # answered all along
        answer.clear()  # "frozen": the socket stays open, nothing answers
        stopped = loop.time()
        judge = await asyncio.wait_for(task, 5)
        took = loop.time() - stopped
        assert judge is not None and judge.answers >= 3
        assert set(seen) == {18}  # ApiVersions only
        assert 0.5 <= took <= 2.0, took
        writer.close()
        server.close()
    asyncio.run(main())


def test_watch_ends_without_verdict_when_the_connection_closes() -> None:
    async def main() -> None:
        answer = asyncio.Event()
        answer.set()
        server, port, _seen = await _listener(answer)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        task = asyncio.get_running_loop().create_task(watch(reader, writer, 0.8))
        await asyncio.sleep(0.3)
        writer.transport.abort()  # the connection ends: the kill path's evidence
        assert await asyncio.wait_for(task, 5) is None
        server.close()
    asyncio.run(main())


def test_the_ping_is_a_framed_api_versions_v0() -> None:
    frame = api_versions_request(7)
    size, key, version, correlation, n = struct.unpack(">ihhih", frame[:14])
    assert (size, key, version, correlation) == (len(frame) - 4, 18, 0, 7)
    assert frame[14:14 + n] == b"yak-liveness"


class _Image:
    """The two things `BrokerLiveness` reads of the metadata store for this choice."""

    def __init__(self, protocol: int) -> None:
        from yak.cluster.etcd_store import BrokerInfo
        from yak.cluster.records import BrokerEndpoint, RegisterBrokerRecord

        eps = (BrokerEndpoint("CLIENTS", "127.0.0.1", 9092, 0),
               BrokerEndpoint("BROKERS", "127.0.0.1", 9093, protocol))
        self._brokers = {2: BrokerInfo(2, 7, RegisterBrokerRecord(2, "x", eps))}

    def add_listener(self, _cb: object) -> None:
        pass

    def brokers(self) -> dict:  # type: ignore[type-arg]
        return self._brokers


def test_only_plain_kafka_listeners_are_pinged() -> None:
    """The probe's endpoint (inter-broker, port 9093) decides: PLAINTEXT (0) and
    SASL_PLAINTEXT (2) are pinged; SSL (1) and SASL_SSL (3), where 14 plain bytes would
    never be answered, are not; nor anything while the bound is 0."""
    from yak.cluster.liveness import BrokerLiveness

    def liveness(protocol: int, unresponsive_ms: int = 2000) -> BrokerLiveness:
        return BrokerLiveness(_Image(protocol), None, None, 1,  # type: ignore[arg-type]
                              lambda _n: ("127.0.0.1", 9093), unresponsive_ms=unresponsive_ms)

    assert [liveness(p)._pingable(2) for p in (0, 1, 2, 3)] == [True, False, True, False]
    assert not liveness(0, unresponsive_ms=0)._pingable(2)
    assert not liveness(0)._pingable(3)  # not registered


# ------------------------------------------------------------------ the second source
# (yak/cluster/liveness_quorum.py; issue 27, run F: a cut-off prober fenced healthy brokers)

def test_a_prober_that_hears_nobody_judges_nobody() -> None:
    """The controller of 3 probes 2 brokers: both silent at once is what being cut off
    looks like from the inside (1 of 3: no verdict); one silent while the other answers
    is a pause (2 of 3: a verdict)."""
    from yak.cluster.liveness_quorum import Hearing, peers_agree

    h = Hearing()
    h.heard(2, 10.0)
    h.heard(3, 10.05)  # the cut: neither answers after 10.05
    ok, why = peers_agree(h, 2, [2, 3], 3, now=12.0, recent_s=1.0)
    assert not ok and "not judged" in why
    assert not peers_agree(h, 3, [2, 3], 3, now=12.05, recent_s=1.0)[0]
    h.heard(3, 11.8)  # broker 3 answers on: broker 2 alone is silent
    ok, why = peers_agree(h, 2, [2, 3], 3, now=12.0, recent_s=1.0)
    assert ok and "2 of 3 brokers agree" in why


def test_the_majority_counts_the_whole_cluster() -> None:
    """5 brokers: a controller that hears 2 of its 4 peers is on the majority side (3 of 5)
    and may judge the silent ones; hearing 1 it is not (2 of 5). With 2 brokers a lone
    probe target is never judged this way: no majority can stand behind it."""
    from yak.cluster.liveness_quorum import Hearing, peers_agree

    h = Hearing()
    for n in (3, 4):
        h.heard(n, 9.9)
    assert peers_agree(h, 2, [2, 3, 4, 5], 5, now=10.0, recent_s=1.0)[0]
    h.forget(4)
    assert not peers_agree(h, 2, [2, 3, 4, 5], 5, now=10.0, recent_s=1.0)[0]
    assert not peers_agree(Hearing(), 2, [2], 2, now=10.0, recent_s=1.0)[0]


class _Brokers:
    """What `BrokerLiveness` reads of the metadata store: the registered brokers (each on
    its own listener, PLAINTEXT) and the controller. The registrations themselves are real
    keys on real leases in etcd, so a verdict's revoke is seen there."""

    def __init__(self, epochs: dict[int, int], ports: dict[int, int],
                 controller: tuple[int, int] | None = None) -> None:
        from yak.cluster.etcd_store import BrokerInfo
        from yak.cluster.records import BrokerEndpoint, RegisterBrokerRecord

        self._brokers = {n: BrokerInfo(n, e, RegisterBrokerRecord(
            n, "x", (BrokerEndpoint("BROKERS", "127.0.0.1", ports.get(n, 1), 0),)))
            for n, e in epochs.items()}
        self.controller = controller

    def add_listener(self, _cb: object) -> None:
        pass

    def brokers(self) -> dict:  # type: ignore[type-arg]
        return self._brokers


async def _register(client, keys, nodes):  # type: ignore[no-untyped-def]
    """Registration keys of `nodes` on leases of their own: node -> (epoch, lease)."""
    out = {}
    for n in nodes:
        lease, _ttl = await client.lease_grant(30)
        await client.put(keys.broker(n), f'{{"brokerId": {n}}}', lease=lease)
        kv = await client.get(keys.broker(n))
        out[n] = (kv.create_revision, lease)
    return out


async def _answering(nodes):  # type: ignore[no-untyped-def]
    """A real listener per node answering ApiVersions while its event is set."""
    answers, servers, ports = {}, [], {}
    for n in nodes:
        ev = asyncio.Event()
        ev.set()
        server, port, _seen = await _listener(ev)
        answers[n], ports[n] = ev, port
        servers.append(server)
    return answers, servers, ports


def test_the_controller_cut_off_from_both_peers_fences_neither(etcd, keys) -> None:  # type: ignore[no-untyped-def]
    """Broker 1 (the controller) probes 2 and 3 on real sockets; both fall silent at
    once (a partition seen from the cut-off side): no verdict, both registrations stay.
    Then broker 3 answers again while 2 stays silent: 2 is fenced (its lease revoked in
    etcd) and 3 is not."""
    from tests.cluster.conftest import run
    from yak.cluster.etcd import EtcdClient
    from yak.cluster.liveness import BrokerLiveness

    async def main() -> None:
        async with EtcdClient(etcd.endpoints) as client:
            regs = await _register(client, keys, [1, 2, 3])
            answers, servers, ports = await _answering([2, 3])
            image = _Brokers({n: e for n, (e, _l) in regs.items()}, ports, (1, 99))
            lv = BrokerLiveness(image, client, keys, 1,  # type: ignore[arg-type]
                                lambda n: ("127.0.0.1", ports[n]) if n in ports else None,
                                unresponsive_ms=800)
            lv.start()
            await asyncio.sleep(1.0)  # answered a few pings each
            answers[2].clear()
            answers[3].clear()
            await asyncio.sleep(2.5)  # three bounds of silence from both
            assert lv.frozen == 0
            assert await client.get(keys.broker(2)) is not None
            assert await client.get(keys.broker(3)) is not None
            answers[3].set()
            for _ in range(40):
                if await client.get(keys.broker(2)) is None:
                    break
                await asyncio.sleep(0.1)
            assert await client.get(keys.broker(2)) is None, "broker 2 was not fenced"
            assert await client.get(keys.broker(3)) is not None
            assert lv.frozen == 1
            await lv.aclose()
            for s in servers:
                s.close()
    run(main())


def test_a_lone_probe_of_the_controller_needs_a_second_suspicion(etcd, keys) -> None:  # type: ignore[no-untyped-def]
    """Broker 2 probes only the controller (1). Its silence alone is no verdict (broker 2
    may be the one cut off): broker 2 records its suspicion in etcd and waits. Once
    broker 3 suspects the same registration too (its suspicion written as broker 3's
    probe writes it), 2 of 3 brokers agree and the controller is fenced."""
    from tests.cluster.conftest import run
    from yak.cluster.etcd import EtcdClient
    from yak.cluster.liveness import BrokerLiveness
    from yak.cluster.liveness_quorum import Suspicions, suspects_prefix

    async def main() -> None:
        async with EtcdClient(etcd.endpoints) as client:
            regs = await _register(client, keys, [1, 2, 3])
            answers, servers, ports = await _answering([1])
            image = _Brokers({n: e for n, (e, _l) in regs.items()}, ports, (1, 99))
            lv = BrokerLiveness(image, client, keys, 2,  # type: ignore[arg-type]
                                lambda n: ("127.0.0.1", ports[n]) if n in ports else None,
                                unresponsive_ms=800)
            lv.open()
            await asyncio.sleep(1.0)
            answers[1].clear()
            await asyncio.sleep(2.5)
            assert lv.frozen == 0
            assert await client.get(keys.broker(1)) is not None
            mine = await client.get(suspects_prefix(keys, 1) + "2")
            assert mine is not None and b'"epoch": %d' % regs[1][0] in mine.value
            # An answer withdraws the suspicion.
            answers[1].set()
            for _ in range(30):
                if await client.get(suspects_prefix(keys, 1) + "2") is None:
                    break
                await asyncio.sleep(0.1)
            assert await client.get(suspects_prefix(keys, 1) + "2") is None
            # Silent again, and now broker 3 suspects it as well: a verdict.
            answers[1].clear()
            other = Suspicions(client, keys, 3, 0.8)
            agreed, _why = await other.agree(1, regs[1][0], [1, 2, 3], 0.0)
            assert not agreed  # broker 3 alone
            for _ in range(60):
                if await client.get(keys.broker(1)) is None:
                    break
                await asyncio.sleep(0.1)
                await other.agree(1, regs[1][0], [1, 2, 3], asyncio.get_running_loop().time())
            assert await client.get(keys.broker(1)) is None, "the controller was not fenced"
            assert lv.frozen == 1
            await lv.aclose()
            for s in servers:
                s.close()
    run(main())


def test_suspicions_of_another_registration_do_not_count(etcd, keys) -> None:  # type: ignore[no-untyped-def]
    """A suspicion names the broker epoch it is about: a stale one of an earlier
    registration never corroborates a silence of the current one."""
    from tests.cluster.conftest import run
    from yak.cluster.etcd import EtcdClient
    from yak.cluster.liveness_quorum import Suspicions

    async def main() -> None:
        async with EtcdClient(etcd.endpoints) as client:
            a, b = Suspicions(client, keys, 2, 2.0), Suspicions(client, keys, 3, 2.0)
            assert not (await a.agree(1, 100, [1, 2, 3], 0.0))[0]
            assert not (await b.agree(1, 101, [1, 2, 3], 0.0))[0]
            ok, why = await b.agree(1, 100, [1, 2, 3], 0.1)
            assert ok and "brokers [2, 3]" in why
            await a.withdraw(1)
            await b.withdraw(1)
            assert not (await a.agree(1, 100, [1, 2, 3], 5.0))[0]
            await a.withdraw(1)
    run(main())
