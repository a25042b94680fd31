"""Client quotas with a manual clock: Kafka's sampled rate, throttle time, entity precedence
and sharing, the Describe/AlterClientQuotas semantics and the store."""

from __future__ import annotations

import asyncio

import pytest

from yak.errors import (
    ErrorCode,
    InvalidRequestError,
    ThrottlingQuotaExceededError,
    UnsupportedVersionError,
)
from yak.security.principal import KafkaPrincipal
from yak.security.quota import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    AlterEntry,
    ClientQuotas,
)
from yak.security.quota_manager import ClientQuotaManager, Rate
from yak.security.quota_store import (
    CLIENT_ID,
    IP,
    USER,
    FileQuotaStore,
    MemoryQuotaStore,
    QuotaEntity,
)


class Clock:
    def __init__(self, t: int = 1_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def U(name: str) -> KafkaPrincipal:
    return KafkaPrincipal("User", name)


def quotas(clock=None, store=None) -> ClientQuotas:
    q = ClientQuotas(store or MemoryQuotaStore(), clock=clock or Clock())
    q.load()
    return q


def alter(q, *entries, validate_only=False):
    return asyncio.run(q.alter([AlterEntry(e, ops) for e, ops in entries], validate_only))


def test_rate_uses_at_least_samples_minus_one_windows():
    r = Rate(11, 1000)
    r.record(1000, 0)
    assert r.window_size_ms(0) == 10000 and r.measure(0) == 100.0
    r.record(1000, 15000)  # the first sample expired (11 windows)
    assert r.measure(15000) == 100.0
    r2 = Rate(11, 1000)
    for t in range(0, 30000, 100):  # 10 records/s of 100 -> 1000/s
        r2.record(100, t)
    assert r2.measure(30000) == pytest.approx(1000, rel=0.1)


def test_throttle_time_is_kafkas_formula():
    clock = Clock(0)
    q = quotas(clock)
    alter(q, ([(USER, "alice")], [("producer_byte_rate", 100, False)]))
    assert q.produce.record_and_get_throttle_time_ms(U("alice"), "c", 1000, 0) == 0  # 100 B/s
    # 2000 B over the 10 s minimum window: 200 B/s, (200-100)/100 * 10 s
    assert q.produce.record_and_get_throttle_time_ms(U("alice"), "c", 1000, 0) == 10000
    assert q.produce.record_and_get_throttle_time_ms(U("bob"), "c", 10**9, 0) == 0  # no quota


def test_a_tiny_quota_throttles_by_the_most_a_response_can_carry():
    """request_percentage=5e-324 (a positive double AlterClientQuotas accepts, found by
    schemathesis through the console's quota API) made the throttle infinite: round()
    raised, and every request of that client failed its connection. Now it is capped at
    the window (request quota) or the int32 the wire carries (byte rates)."""
    clock = Clock(0)
    q = quotas(clock)
    alter(q, ([(USER, "alice")], [("producer_byte_rate", 5e-324, False),
                                   ("request_percentage", 5e-324, False)]))
    assert q.produce.record_and_get_throttle_time_ms(U("alice"), "c", 1000, 0) == 2**31 - 1
    t = q.request.record_and_get_throttle_time_ms(U("alice"), "c", 50.0, 0)
    assert 0 < t <= q.request.max_throttle_ms


def test_a_producer_that_honours_throttle_time_gets_its_byte_rate():
    """Simulated time: the client sends 10 KiB batches as fast as allowed, waiting out each
    throttle_time_ms. After the first window (where, as in Kafka, up to (samples - 1)
    windows' worth passes at once) its rate is the quota within 5%."""
    clock = Clock(0)
    q = quotas(clock)
    alter(q, ([(CLIENT_ID, "p1")], [("producer_byte_rate", 50_000, False)]))
    t, sent_steady, t_steady = 0, 0, None
    while t < 120_000:
        throttle = q.produce.record_and_get_throttle_time_ms(U("ANONYMOUS"), "p1", 10_240, t)
        if t >= 30_000:
            t_steady = t if t_steady is None else t_steady
            sent_steady += 10_240
        t += max(throttle, 5)  # 5 ms per request when not throttled
    assert sent_steady / ((t - t_steady) / 1000) == pytest.approx(50_000, rel=0.05)


def test_precedence_and_which_clients_share_a_rate():
    q = quotas()
    alter(
        q,
        ([(USER, "alice"), (CLIENT_ID, "app")], [("producer_byte_rate", 1, False)]),
        ([(USER, "alice"), (CLIENT_ID, None)], [("producer_byte_rate", 2, False)]),
        ([(USER, "bob")], [("producer_byte_rate", 3, False)]),
        ([(USER, None), (CLIENT_ID, "app")], [("producer_byte_rate", 4, False)]),
        ([(USER, None)], [("producer_byte_rate", 5, False)]),
        ([(CLIENT_ID, "tool")], [("producer_byte_rate", 6, False)]),
        ([(CLIENT_ID, None)], [("producer_byte_rate", 7, False)]),
    )
    p = q.produce
    assert p.quota(U("alice"), "app") == 1
    assert p.quota(U("alice"), "other") == 2  # user + default client-id
    assert p.quota(U("bob"), "app") == 3  # user beats default-user+client-id
    assert p.quota(U("carol"), "app") == 4
    assert p.quota(U("carol"), "x") == 5
    # bob's user quota is shared by all his client ids; carol's default quota is hers alone
    assert p.metric_tags("bob", "a") == p.metric_tags("bob", "b") == ("bob", "")
    assert p.metric_tags("carol", "x") == ("carol", "") != p.metric_tags("dave", "x")
    q2 = quotas()
    alter(
        q2,
        ([(CLIENT_ID, "tool")], [("consumer_byte_rate", 6, False)]),
        ([(CLIENT_ID, None)], [("consumer_byte_rate", 7, False)]),
    )
    assert q2.fetch.quota(U("x"), "tool") == 6 and q2.fetch.quota(U("x"), "other") == 7
    assert q2.fetch.metric_tags("x", "tool") == ("", "tool")  # client-id quotas ignore users
    assert q2.produce.quota(U("x"), "tool") is None  # keys are independent


def test_shared_user_quota_throttles_all_of_the_users_clients():
    clock = Clock(0)
    q = quotas(clock)
    alter(q, ([(USER, "bob")], [("consumer_byte_rate", 100, False)]))
    assert q.fetch.record_and_get_throttle_time_ms(U("bob"), "a", 1000, 0) == 0
    assert q.fetch.record_and_get_throttle_time_ms(U("bob"), "b", 1000, 0) == 10000
    q.fetch.unrecord(U("bob"), "b", 1000, 0)  # a throttled fetch is answered empty
    assert q.fetch.record_and_get_throttle_time_ms(U("bob"), "b", 0, 0) == 0
    assert q.fetch.max_value_in_quota_window(U("bob"), "a") == 1000
    assert q.fetch.max_value_in_quota_window(U("eve"), "a") == float("inf")


def test_request_percentage_is_capped_at_one_window():
    q = quotas(Clock(0))
    alter(q, ([(USER, "alice")], [("request_percentage", 10, False)]))
    assert q.request.record_and_get_throttle_time_ms(U("alice"), "c", 5000, 0) == 1000


def test_controller_mutation_rate_strict_and_permissive():
    clock = Clock(0)
    q = quotas(clock)
    alter(q, ([(USER, "alice")], [("controller_mutation_rate", 1, False)]))
    cm = q.controller_mutation
    assert cm.record_mutations(U("alice"), "c", 10, strict=True, now_ms=0) == 0  # burst 11
    assert cm.record_mutations(U("alice"), "c", 5, strict=True, now_ms=0) == 4000  # -> -4
    with pytest.raises(ThrottlingQuotaExceededError) as exc:
        cm.record_mutations(U("alice"), "c", 1, strict=True, now_ms=1000)  # -3 left
    assert exc.value.code == ErrorCode.throttling_quota_exceeded
    assert exc.value.throttle_time_ms == 3000
    assert cm.record_mutations(U("alice"), "c", 1, strict=False, now_ms=1000) == 4000
    assert cm.record_mutations(U("alice"), "c", 1, strict=True, now_ms=6000) == 0  # refilled


def test_idle_client_rates_expire():
    q = quotas(Clock(0))
    alter(q, ([(CLIENT_ID, None)], [("producer_byte_rate", 100, False)]))
    for i in range(50):
        q.produce.record_and_get_throttle_time_ms(U("a"), f"client-{i}", 1, 0)
    assert q.produce.sensor_count() == 50
    q.maintenance(3600 * 1000)
    assert q.produce.sensor_count() == 0


def test_no_quota_means_nothing_recorded():
    q = quotas()
    assert q.produce.record_and_get_throttle_time_ms(U("a"), "c", 10**12) == 0
    assert q.produce.sensor_count() == 0


# --------------------------------------------------------------------------- APIs


def test_alter_validation_like_kafka():
    q = quotas()
    res = alter(
        q,
        ([], [("producer_byte_rate", 1, False)]),
        ([(USER, "a"), (USER, "b")], [("producer_byte_rate", 1, False)]),
        ([(IP, "1.2.3.4")], [("connection_creation_rate", 1, False)]),
        ([("group", "g")], [("producer_byte_rate", 1, False)]),
        ([(USER, "k")], [("bogus_rate", 1, False)]),
        ([(USER, "z")], [("producer_byte_rate", 0, False)]),
        ([(USER, "f")], [("producer_byte_rate", 1.5, False)]),
        ([(USER, "d")], [("producer_byte_rate", 1, False), ("producer_byte_rate", 2, False)]),
        ([(USER, "ok")], [("request_percentage", 12.5, False), ("producer_byte_rate", 1e6, False)]),
    )
    msgs = [(r.error_code, r.error_message) for r in res]
    assert msgs[0] == (ErrorCode.invalid_request, "Invalid empty client quota entity")
    assert "duplicate entity entry user" in msgs[1][1]
    assert "IP quotas" in msgs[2][1]
    assert "Unhandled client quota entity type: group" in msgs[3][1]
    assert msgs[4][1] == "Invalid configuration key bogus_rate"
    assert msgs[5][1] == "Quota producer_byte_rate must be greater than 0"
    assert msgs[6][1] == "producer_byte_rate cannot be a fractional value."
    assert "Duplicate quota key producer_byte_rate" in msgs[7][1]
    assert msgs[8] == (0, None)
    assert all(code == ErrorCode.invalid_request for code, _ in msgs[:8])
    assert q.describe([], False) == [
        ({USER: "ok"}, {"request_percentage": 12.5, "producer_byte_rate": 1e6})
    ]


def test_validate_only_and_removal():
    q = quotas()
    alter(q, ([(USER, "a")], [("producer_byte_rate", 10, False)]), validate_only=True)
    assert q.describe([], False) == []
    alter(q, ([(USER, "a")], [("producer_byte_rate", 10, False), ("consumer_byte_rate", 5, False)]))
    alter(q, ([(USER, "a")], [("producer_byte_rate", 0, True), ("request_percentage", 0, True)]))
    assert q.describe([], False) == [({USER: "a"}, {"consumer_byte_rate": 5})]
    alter(q, ([(USER, "a")], [("consumer_byte_rate", 0, True)]))
    assert q.describe([], False) == []
    assert q.produce.quota(U("a"), "c") is None


def test_describe_filters():
    q = quotas()
    alter(
        q,
        ([(USER, "alice")], [("producer_byte_rate", 1, False)]),
        ([(USER, None)], [("producer_byte_rate", 2, False)]),
        ([(USER, "alice"), (CLIENT_ID, "app")], [("producer_byte_rate", 3, False)]),
        ([(CLIENT_ID, None)], [("producer_byte_rate", 4, False)]),
    )

    def d(components, strict=False):
        return sorted(
            (
                tuple(sorted((k, v or "") for k, v in e.items()))
                for e, _ in q.describe(components, strict)
            )
        )

    assert d([(USER, MATCH_EXACT, "alice")]) == [
        (("client-id", "app"), ("user", "alice")),
        (("user", "alice"),),
    ]
    assert d([(USER, MATCH_EXACT, "alice")], strict=True) == [(("user", "alice"),)]
    assert d([(USER, MATCH_DEFAULT, None)]) == [(("user", ""),)]
    assert len(d([(USER, MATCH_SPECIFIED, None)])) == 3
    assert d([(CLIENT_ID, MATCH_SPECIFIED, None)], strict=True) == [(("client-id", ""),)]
    assert d([(IP, MATCH_SPECIFIED, None)]) == []
    for bad, exc in [
        ([("", MATCH_EXACT, "x")], InvalidRequestError),
        ([(USER, MATCH_EXACT, "a"), (USER, MATCH_DEFAULT, None)], InvalidRequestError),
        ([("group", MATCH_EXACT, "a")], UnsupportedVersionError),
        ([(USER, MATCH_EXACT, None)], InvalidRequestError),
        ([(USER, MATCH_DEFAULT, "x")], InvalidRequestError),
        ([(USER, MATCH_SPECIFIED, "x")], InvalidRequestError),
        ([(USER, 7, None)], InvalidRequestError),
        ([(IP, MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)], InvalidRequestError),
    ]:
        with pytest.raises(exc):
            q.describe(bad, False)


def test_file_store_survives_restart_and_failed_write_changes_nothing(tmp_path):
    path = tmp_path / "__client_quotas.json"
    q = quotas(store=FileQuotaStore(path))
    alter(q, ([(USER, "alice"), (CLIENT_ID, None)], [("producer_byte_rate", 1024, False)]))
    q2 = quotas(store=FileQuotaStore(path))
    assert q2.describe([], False) == [
        ({USER: "alice", CLIENT_ID: None}, {"producer_byte_rate": 1024.0})
    ]
    assert q2.produce.quota(U("alice"), "anything") == 1024

    class Broken(MemoryQuotaStore):
        def apply(self, changes):
            raise OSError("disk full")

    q3 = quotas(store=Broken())
    [r] = alter(q3, ([(USER, "a")], [("producer_byte_rate", 1, False)]))
    assert r.error_code == ErrorCode.unknown_server_error and "disk full" in r.error_message
    assert q3.produce.quota(U("a"), "c") is None


def test_settings_feed_the_windows():
    q = ClientQuotas.from_settings(
        {"quota.window.num": "3", "quota.window.size.seconds": "2"},
        MemoryQuotaStore(),
        clock=Clock(0),
    )
    q.load()
    assert (q.produce.samples, q.produce.window_ms) == (3, 2000)
    assert isinstance(q.produce, ClientQuotaManager)
    assert str(QuotaEntity.of({USER: None, CLIENT_ID: "x"})) == "user <default> client-id x"
