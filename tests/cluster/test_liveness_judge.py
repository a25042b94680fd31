"""The frozen-broker verdict's guards (yak/cluster/liveness_pings.py), on the pure judge and
on a real socket: a broker that never answered is never judged, a prober whose own loop was
late judges nothing, an answer resets the silence, and a listener that stops answering is
judged after the bound."""

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
