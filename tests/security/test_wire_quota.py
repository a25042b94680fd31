"""Client quotas on the wire: a producer over its `producer_byte_rate` is throttled to it.

The broker answers with `throttle_time_ms` and holds the connection back for that long
(KIP-219); an unthrottled user in the same run shows the limit is the quota, not the
machine. Windows are shortened (2 x 1 s) so the measured rate settles within seconds.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from security.conftest import Certs, SecuredBroker, plain_users, start_secured
from security.wire import rdkafka
from yak.client import KafkaClient

QUOTA = 200_000  # bytes/s
USERS = {"alice": "alice-pw", "bob": "bob-pw"}


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> SecuredBroker:
    d = tmp_path_factory.mktemp("quota") / "data"
    d.mkdir()
    broker = start_secured(
        d, ["SASL_PLAINTEXT", "PLAINTEXT"], certs,
        **{
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_users(**USERS),
            "quota.window.num": "2",
            "quota.window.size.seconds": "1",
        },
    )
    with KafkaClient(broker.addr("PLAINTEXT")) as c:
        res = c.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": QUOTA,
                                                           "consumer_byte_rate": QUOTA})])
        assert [code for _, code, _ in res] == [0]
    yield broker
    broker.stop(10)


def _conf(b: SecuredBroker, user: str, **extra) -> dict:
    return rdkafka(b.addr("SASL_PLAINTEXT"), "SASL_PLAINTEXT", None, "PLAIN", user, USERS[user],
                   **extra)


def _produce_rate(b: SecuredBroker, user: str, seconds: float, warmup: float = 1.5
                  ) -> tuple[float, list[int]]:
    """Acknowledged payload bytes/s after `warmup`, producing as fast as allowed."""
    throttles: list[int] = []
    acked: list[tuple[float, int]] = []
    # A small client queue: byte-rate throttles are not capped (Kafka caps only the request
    # quota's), so a first burst of 2 MiB (the queue filling while a slow SASL login ends)
    # is throttled ~9 s at 200 kB/s and leaves the measured window with no acks at all.
    p = Producer(_conf(b, user, **{"linger.ms": 5, "batch.size": 65536,
                                  "queue.buffering.max.kbytes": 256,
                                  "throttle_cb": lambda e: throttles.append(
                                      int(e.throttle_time * 1000))}))
    value = b"v" * 1000
    t0 = time.monotonic()
    end = t0 + warmup + seconds
    while time.monotonic() < end:
        try:
            p.produce(f"quota-{user}", value,
                      on_delivery=lambda err, m: err is None and acked.append(
                          (time.monotonic(), len(m.value()))))
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.flush(30)
    start = t0 + warmup
    window = [n for t, n in acked if start <= t <= end]
    return sum(window) / seconds, throttles


def test_a_producer_is_held_to_its_byte_rate(b):
    limited, throttles = _produce_rate(b, "alice", 4.0)
    free, _ = _produce_rate(b, "bob", 2.0, warmup=0.5)
    # Near the quota (request overhead counts too, so a little under) ...
    assert 0.5 * QUOTA <= limited <= 1.3 * QUOTA, (limited, free)
    # ... while the same client without a quota is far faster: throttling is what held it.
    assert free >= 3 * limited, (limited, free)
    # The broker told the client (throttle_time_ms > 0 in its responses).
    assert throttles and max(throttles) > 0


def test_a_throttled_consumer_gets_its_byte_rate(b):
    """alice's consumer_byte_rate: fetches over it are answered empty and delayed."""
    # Batches well under what one quota window holds (a fetch returns whole batches).
    p = Producer(_conf(b, "bob", **{"batch.size": 16384}))
    for _ in range(1500):
        p.produce("quota-fetch", b"c" * 1000)
    assert p.flush(30) == 0

    def consume_rate(user: str, seconds: float) -> float:
        c = Consumer(_conf(b, user, **{"group.id": f"q-{user}-{time.monotonic_ns()}",
                                      "auto.offset.reset": "earliest",
                                      "fetch.max.bytes": 1 << 20}))
        c.assign([TopicPartition("quota-fetch", 0, OFFSET_BEGINNING)])  # no group to join
        got = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds and got < 1_500_000:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got += len(m.value())
        elapsed = time.monotonic() - t0
        c.close()
        return got / elapsed

    free = consume_rate("bob", 3.0)
    limited = consume_rate("alice", 4.0)
    assert 0.3 * QUOTA <= limited <= 2.0 * QUOTA, (limited, free)  # first window in one go
    assert free >= 3 * limited, (limited, free)
