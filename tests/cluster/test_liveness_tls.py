"""Issue 27's frozen verdict on SSL and SASL_SSL listeners, in process, against one real
`yak serve` broker (certificates from trustme): the probe's TLS connection
(`yak.cluster.liveness.connect`) and its pings (`liveness_pings.watch`).

The broker has a PLAINTEXT listener, an SSL one that requires client certificates (mTLS)
and a SASL_SSL one (PLAIN). The probe's TLS context is the one a broker would use for its
own inter-broker connections (`ClientSecurity.for_inter_broker` over those settings: the
truststore, and the keystore's certificate as the client certificate). Then:

- on both TLS listeners, pings are answered (no SASL login on SASL_SSL), and a SIGSTOP
  turns them into a frozen verdict within the bound plus a little;
- while the broker is stopped, a new TLS connection completes its TCP connect (the kernel)
  but not its handshake: "other", judge nothing, within the handshake timeout;
- a trust store that does not accept the broker's certificate raises `TlsRefused`, and
  `BrokerLiveness` falls back to a plain idle connection, logged once, never pinged; so
  does a probe without a client certificate on the mTLS listener (TLS 1.3: the broker
  closes the connection after the handshake, unanswered), once, not in a reconnect loop;
- a stopped broker's port refuses: "refused", the kill verdict's evidence, as before.

The same on three brokers, with the verdict and its fencing: test_liveness_tls_cluster.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path

import pytest
import trustme

from tests.security.conftest import JAAS_PLAIN, make_certs, start_secured
from yak.cluster import liveness
from yak.cluster.liveness import BrokerLiveness, TlsRefused, _ProbeTls, connect
from yak.cluster.liveness_pings import FreezeJudge, watch
from yak.security.client import ClientSecurity
from yak.security.listeners import parse_listeners

BOUND_S = 1.0
SLACK_S = 2.0  # a loaded 2-core host: the verdict may come this late past the bound
JAAS = JAAS_PLAIN.format(users='username="broker" password="broker-secret"'
                                ' user_broker="broker-secret"')


def _inter_broker_tls(settings: dict[str, str], listener: str):  # noqa: ANN202
    """The TLS context a broker with `settings` uses to reach `listener` of another."""
    s = dict(settings, **{"inter.broker.listener.name": listener})
    ctx = ClientSecurity.for_inter_broker(s, parse_listeners(s)).ssl_context()
    assert ctx is not None
    return ctx


class _Image:
    """What `BrokerLiveness` reads of the metadata store: broker 2's SSL endpoint."""

    def __init__(self, port: int) -> None:
        from yak.cluster.etcd_store import BrokerInfo
        from yak.cluster.records import BrokerEndpoint, RegisterBrokerRecord

        eps = (BrokerEndpoint("SSL", "127.0.0.1", port, 1),)
        self._brokers = {2: BrokerInfo(2, 7, RegisterBrokerRecord(2, "x", eps))}

    def add_listener(self, _cb: object) -> None:
        pass

    def brokers(self) -> dict:  # type: ignore[type-arg]
        return self._brokers


def test_tls_pings_judge_a_stopped_broker_and_bad_trust_falls_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    (tmp_path / "data").mkdir()
    extra = {"listener.name.ssl.ssl.client.auth": "required",
             "sasl.enabled.mechanisms": "PLAIN",
             "sasl.mechanism.inter.broker.protocol": "PLAIN",
             "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS}
    broker = start_secured(tmp_path / "data", ["PLAINTEXT", "SSL", "SASL_SSL"], certs,
                           **extra)
    ssl_port, sasl_ssl_port = broker.listener_port["SSL"], broker.listener_port["SASL_SSL"]
    settings = dict(broker.settings)
    stranger = trustme.CA(organization_name="Not The Yak Test CA")
    (tmp_path / "other-ca.pem").write_bytes(stranger.cert_pem.bytes())
    bad = dict(settings, **{"ssl.truststore.location": str(tmp_path / "other-ca.pem")})
    monkeypatch.setattr(liveness, "HANDSHAKE_TIMEOUT_S", 0.5)
    stopped = False

    async def main() -> None:
        nonlocal stopped
        tls = _inter_broker_tls(settings, "SSL")
        watches = {}
        for name, port in (("SSL", ssl_port),
                           ("SASL_SSL", sasl_ssl_port)):
            got = await connect("127.0.0.1", port, _inter_broker_tls(settings, name))
            assert not isinstance(got, str), f"{name}: {got}"
            watches[name] = asyncio.create_task(watch(*got, BOUND_S))
        # Answered all along: no verdict while the broker runs (3 bounds).
        await asyncio.sleep(3 * BOUND_S)
        for name, task in watches.items():
            assert not task.done(), f"{name}: the watch ended on a live broker: {task}"

        # A trust store that does not take the broker's certificate: configuration.
        with pytest.raises(TlsRefused, match="certificate verify failed"):
            await connect("127.0.0.1", ssl_port, _inter_broker_tls(bad, "SSL"))
        lv = BrokerLiveness(_Image(ssl_port), None, None, 1,  # type: ignore[arg-type]
                            lambda _n: ("127.0.0.1", ssl_port), unresponsive_ms=2000,
                            tls=_inter_broker_tls(bad, "SSL"))
        probe = _ProbeTls()
        with caplog.at_level(logging.WARNING, logger="yak.cluster.liveness"):
            for _ in range(2):  # the second connect does not try TLS again, nor log
                got = await lv._connect(2, probe)
                assert not isinstance(got, str), got
                got[1].close()
                assert (probe.tls_ok, probe.secured, lv.tls_refused) == (False, False, 1)
                assert not lv._pingable(2, probe.secured)
        warned = [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]
        assert len(warned) == 1 and "not a dead broker" in warned[0] \
            and f"127.0.0.1:{ssl_port} over TLS" in warned[0], warned
        # The good context: a TLS connection, pinged.
        good = BrokerLiveness(_Image(ssl_port), None, None, 1,  # type: ignore[arg-type]
                              lambda _n: ("127.0.0.1", ssl_port), unresponsive_ms=2000,
                              tls=tls)
        probe = _ProbeTls()
        got = await good._connect(2, probe)
        assert not isinstance(got, str), got
        got[1].close()
        assert probe.secured and good._pingable(2, probe.secured) and good.tls_refused == 0

        # No client certificate on the mTLS listener: TLS 1.3 completes the client's
        # handshake, then the broker closes the connection unanswered. The probe gives
        # TLS up once (no reconnect loop) and keeps a plain idle connection.
        caplog.clear()
        no_cert = ClientSecurity.from_properties({
            "security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
            "ssl.endpoint.identification.algorithm": "none"}).ssl_context()
        anon = BrokerLiveness(_Image(ssl_port), None, None, 1,  # type: ignore[arg-type]
                              lambda _n: ("127.0.0.1", ssl_port), unresponsive_ms=2000,
                              tls=no_cert)
        with caplog.at_level(logging.INFO, logger="yak.cluster.liveness"):
            task = asyncio.create_task(anon._probe(2, 7))
            await asyncio.sleep(1.5)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        lines = [r.getMessage() for r in caplog.records]
        gave_up = [ln for ln in lines if "before answering any ping" in ln]
        assert len(gave_up) == 1 and anon.tls_refused == 1, lines
        probing = [ln for ln in lines if "liveness: probing broker 2" in ln]
        assert probing[0].endswith("on a pinged TLS connection"), probing
        assert probing[-1].endswith("on an idle connection") and len(probing) <= 3, probing

        # SIGSTOP: both TLS connections go silent and are judged frozen.
        os.kill(broker.pid, signal.SIGSTOP)
        stopped = True
        paused = time.monotonic()
        for name, task in watches.items():
            judge = await asyncio.wait_for(task, BOUND_S + SLACK_S + 5)
            took = time.monotonic() - paused
            assert isinstance(judge, FreezeJudge), f"{name}: {judge}"
            assert judge.answers >= 1 and judge.pings > judge.answers, judge.evidence(0)
            # The silence counts from the last answer, up to one ping interval before it.
            assert BOUND_S - 0.25 <= took <= BOUND_S + SLACK_S, \
                f"{name}: judged after {took:.2f} s"
            print(f"\n{name}: frozen verdict {took:.2f} s after SIGSTOP (bound {BOUND_S} s):"
                  f" {judge.evidence(judge.judged_at)}")
        # A new connection to the stopped broker: the kernel completes it, nobody answers
        # the handshake: judge nothing.
        t0 = time.monotonic()
        assert await connect("127.0.0.1", ssl_port, tls) == "other"
        assert time.monotonic() - t0 < 0.5 + 1.5
        os.kill(broker.pid, signal.SIGCONT)
        stopped = False
        got = await connect("127.0.0.1", ssl_port, tls)  # answered again
        assert not isinstance(got, str), got
        got[1].close()

    try:
        asyncio.run(main())
        broker.stop(15)
        assert asyncio.run(connect("127.0.0.1", ssl_port, _inter_broker_tls(settings, "SSL"))
                           ) == "refused"
    finally:
        if stopped:
            os.kill(broker.pid, signal.SIGCONT)
        broker.stop(15)
        broker.kill()
