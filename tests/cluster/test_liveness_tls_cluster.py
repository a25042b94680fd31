"""Issue 27's frozen verdict when the inter-broker listener is SSL or SASL_SSL, end to end:
etcd, three `yak serve` brokers that reach each other only over a TLS listener `BROKER`
(certificates from trustme; SSL with client certificates required, or SASL_SSL with PLAIN),
a PLAINTEXT listener for the test's librdkafka clients, Yak's default sessions (9 s) and
`broker.liveness.unresponsive.ms` (2000).

The probe connects to `BROKER` with the broker's own inter-broker TLS context (the replica
fetchers': yak/cluster/liveness.py) and pings ApiVersions on it, before any SASL login. So:

- SSL (mTLS): SIGSTOP a follower of every partition: the controller fences it as frozen
  well before its 9 s session could; SIGCONT: it registers again and rejoins every ISR;
- SASL_SSL: SIGSTOP the controller: the other brokers fence it as frozen (their majority
  in etcd), the next controller is elected; SIGCONT: it registers again;
- a trust store that does not accept the brokers' certificates (a configuration mistake)
  fences nobody: each prober logs the failed handshake once and falls back to an idle
  connection, a pause of 6 s (under the session) is no verdict, and a kill -9 is still
  fenced at once by the kill verdict (refused connects).

About 25-45 s each on a loaded 2-core machine (a cluster start, a pause, a rejoin): slow.
The fast, in-process check of the same TLS pings is test_liveness_tls.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trustme
from confluent_kafka.admin import NewTopic

from tests.cluster.test_dead_leader_fast import DEFAULTS, PARTITIONS, TOPIC, _log, _metadata, _wait
from tests.cluster.test_liveness_pause import BOUND_S
from tests.conftest import free_port
from tests.security.conftest import make_certs
from yak.chaos.env import ChaosCluster, ClusterSpec

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret";')


class TlsInterBrokerCluster(ChaosCluster):
    """A chaos cluster whose brokers reach each other only over a `protocol` (SSL or
    SASL_SSL) listener `BROKER` (its port per node in `inter_port`); clients keep the
    PLAINTEXT port. `truststore`: the CA file the brokers trust (their own CA, unless a
    test wants a bad one)."""

    def __init__(self, spec: ClusterSpec, protocol: str, certs_dir: Path,
                 truststore: Path | None = None) -> None:
        super().__init__(spec)
        self.protocol = protocol
        self.certs = make_certs(certs_dir)
        self.truststore = truststore or self.certs.ca
        self.inter_port = {n: free_port() for n in self.node_ids}

    def _broker_process(self, node: int):  # noqa: ANN202 (ChaosCluster's own type)
        h = self.host(node)
        settings = {
            "listeners": f"PLAINTEXT://{h}:{self.kafka_port(node)},"
                         f"BROKER://{h}:{self.inter_port[node]}",
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,BROKER:{self.protocol}",
            "inter.broker.listener.name": "BROKER",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.certs.broker),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.truststore),
        }
        if self.protocol == "SSL":
            settings["listener.name.broker.ssl.client.auth"] = "required"
        else:
            settings.update({
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.broker.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.broker.plain.sasl.jaas.config": JAAS,
            })
        self.spec.broker_settings.update(settings)
        return super()._broker_process(node)


def _start(tmp_path: Path, protocol: str, truststore: Path | None = None,
           topic: bool = True) -> TlsInterBrokerCluster:
    (tmp_path / "certs").mkdir()
    cluster = TlsInterBrokerCluster(ClusterSpec(
        tmp_path / "cluster", brokers=3, session_timeout_ms=9000,
        broker_settings=dict(DEFAULTS)), protocol, tmp_path / "certs", truststore)
    cluster.start()
    try:  # a failed start must not leave the brokers running
        if topic:
            admin = cluster.admin()
            fs = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                               config={"min.insync.replicas": "2"})])
            for f in fs.values():
                f.result(30)
            _wait(lambda: len(_metadata(cluster)[1]) == PARTITIONS
                  and all(leader > 0 and len(isr) == 3
                          for leader, isr in _metadata(cluster)[1].values()),
                  60, f"leaders and full ISRs (replication over {protocol})")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _controller(cluster: ChaosCluster) -> int:
    controller = -1

    def known() -> bool:
        nonlocal controller
        controller = cluster.admin().list_topics(timeout=5).controller_id
        return controller > 0

    _wait(known, 30, "a controller")
    return controller


def _verdicts(cluster: ChaosCluster, probers: list[int], victim: int) -> list[str]:
    return [ln for n in probers for ln in _log(cluster, n).splitlines()
            if "frozen; fenced" in ln
            and (f"liveness: broker {victim} " in ln or f"liveness: controller {victim} " in ln)]


def _pause_until_fenced(cluster: ChaosCluster, victim: int, probers: list[int]) -> float:
    """SIGSTOP `victim`; seconds until a prober's log says it fenced it as frozen."""
    paused = time.monotonic()
    cluster.pause(victim)
    _wait(lambda: _verdicts(cluster, probers, victim), 30, f"a frozen verdict on {victim}")
    return time.monotonic() - paused


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_a_frozen_broker_is_fenced_over_a_tls_inter_broker_listener(
        tmp_path: Path, protocol: str) -> None:
    """SSL: the victim is a follower (the controller judges it); SASL_SSL: the victim is
    the controller (the two other brokers judge it)."""
    cluster = _start(tmp_path, protocol)
    victim = -1
    try:
        controller = _controller(cluster)
        others = [n for n in cluster.node_ids if n != controller]
        if protocol == "SSL":
            victim, probers = others[0], [controller]
        else:
            victim, probers = controller, others
        registered = f"broker {victim} registered, epoch"
        assert _log(cluster, victim).count(registered) == 1
        # Pinged over TLS, and answered, before the pause.
        probing = f"liveness: probing broker {victim} "
        _wait(lambda: all(probing in _log(cluster, n) for n in probers), 30,
              "the probes connected to the victim")
        lines = [ln for n in probers for ln in _log(cluster, n).splitlines() if probing in ln]
        assert all("a pinged TLS connection" in ln for ln in lines), lines
        assert not any("over TLS: " in _log(cluster, n) for n in cluster.node_ids)
        time.sleep(1.0)  # a few answers on those connections
        took = _pause_until_fenced(cluster, victim, probers)
        verdicts = _verdicts(cluster, probers, victim)
        print(f"\n{protocol} inter-broker listener: SIGSTOP of broker {victim} (controller"
              f" {controller}) -> fenced as frozen after {took:.2f} s: {verdicts}")
        assert took < BOUND_S, f"fenced {took:.2f} s after the pause (session: 9 s)"
        if protocol == "SSL":
            assert len(verdicts) == 1, verdicts
            _wait(lambda: all(victim not in isr for _l, isr in _metadata(cluster)[1].values()),
                  15, "the frozen follower out of every ISR")
        else:
            _wait(lambda: _controller(cluster) not in (victim, -1), 30, "a new controller")
        cluster.resume(victim)
        # SIGCONT: it finds its lease gone, registers anew, catches up over TLS, rejoins.
        _wait(lambda: _log(cluster, victim).count(registered) == 2, 60,
              "the resumed broker registered again")
        _wait(lambda: all(len(isr) == 3 for _l, isr in _metadata(cluster)[1].values()),
              60, "the resumed broker back in every ISR")
    finally:
        if victim > 0:
            cluster.resume(victim)
        cluster.stop()


@pytest.mark.slow
def test_a_bad_trust_store_fences_nobody_and_keeps_the_kill_verdict(tmp_path: Path) -> None:
    other = trustme.CA(organization_name="Not The Yak Test CA")
    bad = tmp_path / "other-ca.pem"
    bad.write_bytes(other.cert_pem.bytes())
    # Replication cannot work either (the same trust store): no topic, only the probes.
    cluster = _start(tmp_path, "SSL", truststore=bad, topic=False)
    victim = -1
    try:
        controller = _controller(cluster)
        victim = next(n for n in cluster.node_ids if n != controller)
        registered = f"broker {victim} registered, epoch"
        warning = f"liveness: broker {victim}'s inter-broker listener"
        _wait(lambda: warning in _log(cluster, controller), 30,
              "the controller's warning about the failed handshake")
        probing = f"liveness: probing broker {victim} "
        _wait(lambda: probing in _log(cluster, controller), 30, "the controller's probe")
        lines = [ln for ln in _log(cluster, controller).splitlines() if probing in ln]
        assert lines and all("an idle connection" in ln for ln in lines), lines
        # A pause of 3 bounds, under the 9 s session: no verdict, no new registration.
        cluster.pause(victim)
        time.sleep(6.0)
        cluster.resume(victim)
        time.sleep(1.0)
        assert not any("frozen; fenced" in _log(cluster, n) for n in cluster.node_ids)
        assert _log(cluster, victim).count(registered) == 1
        # Logged once per probe, not per connection.
        assert _log(cluster, controller).count(warning) == 1, \
            [ln for ln in _log(cluster, controller).splitlines() if warning in ln]
        # The kill verdict still holds on the idle connection: fenced at once.
        killed = time.monotonic()
        cluster.kill(victim)
        gone = f"liveness: broker {victim} "
        _wait(lambda: any(gone in ln and "its process is gone; fenced" in ln
                          for ln in _log(cluster, controller).splitlines()), 15,
              "the kill verdict on the killed broker")
        took = time.monotonic() - killed
        print(f"\nbad trust store: no frozen verdict in a 6 s pause; kill -9 of broker"
              f" {victim} fenced after {took:.2f} s")
        assert took < BOUND_S, f"fenced {took:.2f} s after the kill (session: 9 s)"
    finally:
        if victim > 0:
            cluster.resume(victim)
        cluster.stop()
