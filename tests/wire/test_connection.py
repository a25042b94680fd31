"""`yak.wire.KafkaConnection` against real `yak serve` processes: pipelined requests come
back to their own callers in order, a timed-out or cancelled request poisons the
connection (the next request opens a new one and gets its own answer), a broker that
closes mid-response or answers a malformed frame gives a clear error, never a hang, and
TLS and SASL logins go through `yak.security.connect`.

The faults are made by a small TCP relay between the connection and the real broker
that cuts or rewrites the broker's bytes; the broker itself is never mocked."""

from __future__ import annotations

import asyncio
import datetime
import struct
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import free_port
from security.conftest import certs, plain_users, secured_broker  # noqa: F401 - fixtures

from tests.waiting import await_until
from yak.errors import SaslAuthenticationError
from yak.protocol import kio_compat
from yak.protocol.fetch_client_codec import (
    FetchRequestPartition,
    FetchRequestTopic,
    decode_fetch_response,
    encode_fetch_request,
)
from yak.security.client import ClientSecurity
from yak.security.connect import connection as secure_connection
from yak.wire import BrokerConnectionError, KafkaConnection, RequestTimeoutError


def run(coro: Any, timeout: float = 60.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def _topics(bootstrap: str, *names: str) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    for f in a.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(30)


def _metadata(topic: str) -> Any:
    mod = kio_compat.schema_module("metadata", 12, "request")
    return kio_compat.build(
        mod.MetadataRequest, topics=(kio_compat.build(mod.MetadataRequestTopic, name=topic,
                                                      topic_id=None),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def _fetch(topic: str, wait_ms: int) -> Any:
    """Fetch v12 of an empty partition: the broker holds it `wait_ms` (min_bytes 1)."""
    mod = kio_compat.schema_module("fetch", 12, "request")
    part = kio_compat.build(mod.FetchPartition, partition=0, fetch_offset=0,
                            partition_max_bytes=1 << 20, current_leader_epoch=-1,
                            log_start_offset=-1, last_fetched_epoch=-1)
    return kio_compat.build(
        mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms),
        min_bytes=1 if wait_ms else 0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1,
        topics=(kio_compat.build(mod.FetchTopic, topic=topic, partitions=(part,)),),
        forgotten_topics_data=(), rack_id="")


def _conn(port: int, **kw: Any) -> KafkaConnection:
    return KafkaConnection("127.0.0.1", port, client_id="wire-test", **kw)


# ---------------------------------------------------------------- pipelining


def test_pipelined_requests_each_get_their_own_answer_in_order(module_broker) -> None:
    names = [f"pipe-{i}" for i in range(6)]
    _topics(module_broker.bootstrap, *names)

    async def body() -> None:
        conn = _conn(module_broker.port)
        try:
            finished: list[int] = []
            max_in_flight = 0

            async def one(i: int) -> Any:
                nonlocal max_in_flight
                # The first one is held by the broker for 0.8 s: everything sent behind it
                # on this connection is answered after it.
                req = _fetch(names[0], 800) if i == 0 else _metadata(names[i % len(names)])
                task = asyncio.ensure_future(conn.request(req))
                await asyncio.sleep(0)  # one turn of the loop: the request is written
                max_in_flight = max(max_in_flight, conn.in_flight)
                r = await task
                finished.append(i)
                return r

            await conn.open()
            loop = asyncio.get_running_loop()
            start = loop.time()
            results = await asyncio.gather(*(one(i) for i in range(40)))
            assert loop.time() - start >= 0.7  # the held fetch really was held
            assert max_in_flight > 1  # they were in flight together
            assert finished == list(range(40))  # answered in the order sent
            assert int(results[0].responses[0].partitions[0].error_code) == 0
            for i, r in enumerate(results[1:], 1):
                assert [t.name for t in r.topics] == [names[i % len(names)]]
                assert int(r.topics[0].error_code) == 0
        finally:
            conn.close()

    run(body())


def test_hand_written_frames_share_the_connection(module_broker) -> None:
    """The replica fetcher's path: a hand-encoded Fetch frame, its raw response decoded
    by `fetch_client_codec` (records as slices of the frame), beside kio requests."""
    _topics(module_broker.bootstrap, "raw-frames")

    async def body() -> None:
        conn = _conn(module_broker.port)
        try:
            md = await conn.request(_metadata("raw-frames"))
            topic_id = md.topics[0].topic_id
            cid = conn.next_correlation_id()
            frame = encode_fetch_request(
                13, cid, "wire-test", -1, -1, 0, 0, 1 << 20,
                [FetchRequestTopic(topic_id, "raw-frames", [FetchRequestPartition(0, 0)])])
            both = await asyncio.gather(conn.request_frame(frame, cid),
                                        conn.request(_metadata("raw-frames")))
            resp = decode_fetch_response(13, both[0])
            assert resp.correlation_id == cid
            assert resp.topics[0].partitions[0].error_code == 0
            assert [t.name for t in both[1].topics] == ["raw-frames"]
        finally:
            conn.close()

    run(body())


# ---------------------------------------------------------------- poisoning


def test_a_timed_out_request_poisons_the_connection(module_broker) -> None:
    _topics(module_broker.bootstrap, "held-timeout")

    async def body() -> None:
        conn = _conn(module_broker.port, timeout_s=10)
        try:
            held = asyncio.ensure_future(conn.request(_fetch("held-timeout", 3000), 0.4))
            behind = asyncio.ensure_future(conn.request(_metadata("held-timeout")))
            with pytest.raises(RequestTimeoutError):
                await held
            # The request behind it was on the poisoned connection: failed, not answered
            # with the held fetch's response.
            with pytest.raises(BrokerConnectionError):
                await behind
            assert not conn.is_open
            loop = asyncio.get_running_loop()
            for _ in range(3):  # a new connection, each its own answer at once
                start = loop.time()
                r = await conn.request(_fetch("held-timeout", 0))
                assert int(r.responses[0].partitions[0].error_code) == 0
                assert loop.time() - start < 2.0
        finally:
            conn.close()

    run(body())


def test_a_cancelled_request_poisons_the_connection(module_broker) -> None:
    _topics(module_broker.bootstrap, "held-cancel")

    async def body() -> None:
        conn = _conn(module_broker.port, timeout_s=10)
        try:
            held = asyncio.ensure_future(conn.request(_fetch("held-cancel", 3000)))
            await await_until(lambda: conn.in_flight == 1, 10, "the held fetch written")
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)
            assert not conn.is_open and conn.in_flight == 0
            loop = asyncio.get_running_loop()
            start = loop.time()
            r = await conn.request(_metadata("held-cancel"))
            assert [t.name for t in r.topics] == ["held-cancel"]
            assert loop.time() - start < 2.0  # its own answer, not the held fetch's
        finally:
            conn.close()

    run(body())


# ---------------------------------------------------------------- broken peers


class Relay:
    """A TCP relay in front of the real broker: client bytes go through unchanged; the
    broker's answer bytes pass through `mangle(data) -> (data, close_after)`."""

    def __init__(self, broker_port: int,
                 mangle: Callable[[bytes], tuple[bytes, bool]]) -> None:
        self.broker_port = broker_port
        self.mangle = mangle
        self.port = free_port()
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Relay:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        br, bw = await asyncio.open_connection("127.0.0.1", self.broker_port)

        async def up() -> None:
            while data := await cr.read(65536):
                bw.write(data)
            bw.close()

        async def down() -> None:
            while data := await br.read(65536):
                out, close = self.mangle(data)
                cw.write(out)
                if close:
                    await cw.drain()
                    cw.transport.abort()
                    return
            cw.close()

        await asyncio.gather(up(), down(), return_exceptions=True)
        bw.close()


def test_a_broker_closing_mid_response_is_an_error_not_a_hang(module_broker) -> None:
    _topics(module_broker.bootstrap, "cut")

    async def body() -> None:
        # Only the first 10 bytes of the first answer get through, then the socket closes.
        async with Relay(module_broker.port, lambda d: (d[:10], True)) as relay:
            conn = _conn(relay.port, timeout_s=20)
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(BrokerConnectionError, match="closed by the broker"):
                await conn.request(_metadata("cut"))
            assert loop.time() - start < 5  # at once, not at the request timeout
            assert not conn.is_open
        # Reopened by the next request (straight to the broker this time).
        conn.port = module_broker.port
        r = await conn.request(_metadata("cut"))
        assert [t.name for t in r.topics] == ["cut"]
        conn.close()

    run(body())


def test_a_malformed_frame_size_is_a_clear_error(module_broker) -> None:
    async def body() -> None:
        def inflate(d: bytes) -> tuple[bytes, bool]:
            return struct.pack(">i", 1 << 30) + d[4:], False  # announces 1 GiB

        async with Relay(module_broker.port, inflate) as relay:
            conn = _conn(relay.port, timeout_s=20, max_frame=64 << 20)
            with pytest.raises(BrokerConnectionError, match="malformed response"):
                await conn.request(_metadata("any"))
            conn.close()

    run(body())


def test_a_malformed_response_body_is_refused_by_the_guard(module_broker) -> None:
    """A Metadata response whose brokers array announces 2^30 entries: `guard.check`
    refuses it before kio's native reader would reserve the memory."""
    async def body() -> None:
        def corrupt(d: bytes) -> tuple[bytes, bool]:
            # Metadata v12: size, correlation id, header tags (1), throttle (4), then the
            # brokers array's compact length (a uvarint): make it 2^30 + 1.
            pos = 4 + 4 + 1 + 4
            return d[:pos] + b"\x81\x80\x80\x80\x04" + d[pos + 1:], False

        async with Relay(module_broker.port, corrupt) as relay:
            conn = _conn(relay.port, timeout_s=20)
            with pytest.raises(BrokerConnectionError, match="malformed MetadataResponse"):
                await conn.request(_metadata("any"))
            assert not conn.is_open
            conn.close()

    run(body())


def test_a_wrong_correlation_id_fails_at_once(module_broker) -> None:
    """An answer whose correlation id is not the oldest request's: that request fails at
    once (not at its timeout) and the connection is closed."""
    async def body() -> None:
        def shift(d: bytes) -> tuple[bytes, bool]:
            (cid,) = struct.unpack_from(">i", d, 4)
            return d[:4] + struct.pack(">i", cid + 1000) + d[8:], False

        async with Relay(module_broker.port, shift) as relay:
            conn = _conn(relay.port, timeout_s=20)
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(BrokerConnectionError, match="out of step"):
                await conn.request(_metadata("any"))
            assert loop.time() - start < 5 and not conn.is_open
            conn.close()

    run(body())


def test_a_dead_address_fails_to_open_quickly() -> None:
    async def body() -> None:
        conn = _conn(free_port(), timeout_s=5)
        with pytest.raises(BrokerConnectionError, match="cannot connect"):
            await conn.request(_metadata("any"))
        assert isinstance(BrokerConnectionError("x"), OSError)

    run(body())


# ---------------------------------------------------------------- TLS and SASL


USERS = {"alice": "alice-secret"}


def test_tls_and_sasl_plain_login(secured_broker, certs) -> None:  # noqa: F811
    b = secured_broker(["SASL_SSL", "SSL"], **{
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_users(**USERS),
    })
    sasl_port = b.listener_port["SASL_SSL"]
    ssl_port = b.listener_port["SSL"]

    async def body() -> None:
        good = ClientSecurity("SASL_SSL", "PLAIN", "alice", "alice-secret", str(certs.ca))
        conn = secure_connection("127.0.0.1", sasl_port, good, 10, "wire-test")
        try:
            rs = await asyncio.gather(*(conn.request(_metadata("none")) for _ in range(5)))
            assert all(len(r.brokers) == 1 for r in rs)
        finally:
            conn.close()

        bad = ClientSecurity("SASL_SSL", "PLAIN", "alice", "wrong", str(certs.ca))
        conn = secure_connection("127.0.0.1", sasl_port, bad, 10, "wire-test")
        with pytest.raises(SaslAuthenticationError):
            await conn.request(_metadata("none"))
        assert not conn.is_open

        tls = ClientSecurity("SSL", ca_location=str(certs.ca))
        conn = secure_connection("127.0.0.1", ssl_port, tls, 10, "wire-test")
        try:
            r = await conn.request(_metadata("none"))
            assert len(r.brokers) == 1
        finally:
            conn.close()

        # Plain TCP to the TLS listener: the broker drops it, an error, not a hang.
        conn = _conn(ssl_port, timeout_s=5)
        with pytest.raises(BrokerConnectionError):
            await conn.request(_metadata("none"))

    run(body())


def test_open_connection_hands_over_logged_in_streams(secured_broker, certs) -> None:  # noqa: F811
    """`yak.security.connect.open_connection` (the gateway's password check): a logged-in
    socket as asyncio streams, over which requests still work."""
    from yak.security.connect import open_connection

    b = secured_broker(["SASL_PLAINTEXT"], **{
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_users(**USERS),
    })

    async def body() -> None:
        sec = ClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
        reader, writer = await open_connection(
            "127.0.0.1", b.listener_port["SASL_PLAINTEXT"], sec, 10, "wire-test")
        writer.write(kio_compat.encode_request(_metadata("none"), 99, "wire-test"))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        cid, resp = kio_compat.decode_response(3, 12, await reader.readexactly(size))
        assert cid == 99 and len(resp.brokers) == 1
        writer.close()

    run(body())


def test_sasl_scram_login(secured_broker) -> None:  # noqa: F811
    """SCRAM-SHA-256 (client-first, server-first, client-final, server-final verified)
    through the connection's own requests; a wrong password is refused."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    b = secured_broker(["PLAINTEXT", "SASL_PLAINTEXT"], **{
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    })
    admin = AdminClient({"bootstrap.servers": b.addr("PLAINTEXT")})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
            b"bob-secret")]).values():
        f.result(15)
    port = b.listener_port["SASL_PLAINTEXT"]

    async def body() -> None:
        sec = ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", "bob-secret")
        conn = secure_connection("127.0.0.1", port, sec, 10, "wire-test")
        try:
            r = await conn.request(_metadata("none"))
            assert len(r.brokers) == 1
        finally:
            conn.close()
        bad = ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", "nope")
        conn = secure_connection("127.0.0.1", port, bad, 10, "wire-test")
        with pytest.raises(SaslAuthenticationError):
            await conn.request(_metadata("none"))

    run(body())
