"""KIP-368 re-authentication (`connections.max.reauth.ms`) on a real broker."""

from __future__ import annotations

import time

from security.conftest import plain_users
from security.wire import SaslRaw, closed_unanswered, produce, rdkafka
from yak.protocol import kio_compat

USERS = {"alice": "alice-pw", "bob": "bob-pw"}


def test_sessions_expire_and_clients_reauthenticate(secured_broker):
    b = secured_broker(["SASL_PLAINTEXT"], **{
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_users(**USERS),
        "connections.max.reauth.ms": "1500",
    })
    addr = b.addr("SASL_PLAINTEXT")
    # The login answer carries the session lifetime.
    with SaslRaw(addr) as c:
        r = c.login_plain("alice", "alice-pw")
        assert r.error_code == 0 and r.session_lifetime.total_seconds() == 1.5
        c.metadata()
        # Re-authenticating on the same connection, same principal: accepted.
        assert c.login_plain("alice", "alice-pw").error_code == 0
        # Another principal on the same connection: refused (and closed).
        assert c.handshake("PLAIN").error_code == 0
        assert c.authenticate(b"\0bob\0bob-pw").error_code == 58
        assert c.is_closed_by_peer(5)
    # A client that does not re-authenticate is cut off at the end of its session.
    with SaslRaw(addr) as c:
        assert c.login_plain("alice", "alice-pw").error_code == 0
        time.sleep(1.7)  # the point: past the end of its session
        mod = kio_compat.schema_module("metadata", 12, "request")
        req = mod.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
        assert closed_unanswered(c, req)
    # librdkafka re-authenticates by itself: a producer spanning several sessions loses
    # nothing.
    from confluent_kafka import Producer

    conf = rdkafka(addr, "SASL_PLAINTEXT", None, "PLAIN", "alice", "alice-pw")
    results: list = []
    p = Producer(conf)
    t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < 5:
        p.produce("reauth", b"%d" % i, on_delivery=lambda e, m: results.append(e))
        i += 1
        p.poll(0.05)
    assert p.flush(20) == 0
    assert len(results) == i and all(e is None for e in results)
    assert produce(conf, "reauth", [b"last"]) == [None]
    # ... by re-authenticating on its connections, not by being cut off and reconnecting:
    # the only session the broker ended is the raw client's above.
    assert b.log().count("after the SASL session expired") == 1, b.log()[-3000:]
