"""Issue 27's frozen verdict when the inter-broker listener is SASL_PLAINTEXT: the probe's
connection to it never logs in, and is still pinged and judged.

The liveness probe (yak/cluster/liveness.py) connects to each broker's inter-broker
listener and pings it with ApiVersions (liveness_pings.py, `PINGABLE_PROTOCOLS`). On a
SASL listener it sends no SaslHandshake: Kafka serves ApiVersions before authentication
(KIP-511: a client asks for it first), and Yak's `SaslAuthenticator.gate` serves it in the
handshake state again and again, while any other request there closes the connection. So
an unauthenticated connection that only ever asks ApiVersions stays open and answered.

This test runs it end to end with real processes: etcd, three `yak serve` brokers whose
inter-broker listener `BROKER` is SASL_PLAINTEXT (PLAIN, the brokers' own user), a
PLAINTEXT listener for the test's librdkafka clients, RF 3, min.insync.replicas 2, Yak's
default sessions (9 s) and `broker.liveness.unresponsive.ms` (2000). First the premise on
the wire (repeated ApiVersions answered before login on the BROKER port; a Metadata request
there closes the connection unanswered), then the verdict: SIGSTOP a partition's leader,
the controller fences it as frozen and a new leader takes acks=all writes before the 9 s
session could (the bound of tests/cluster/test_liveness_pause.py); SIGCONT: it registers
anew and rejoins every ISR, and every acknowledged write reads back.

About 25-40 s on a loaded 2-core machine (a cluster start, a pause, a rejoin): marked slow.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from tests.cluster.test_dead_leader_fast import (
    DEFAULTS,
    PARTITIONS,
    TOPIC,
    _log,
    _metadata,
    _read_back,
    _victim,
    _wait,
)
from tests.cluster.test_liveness_pause import BOUND_S, RefreshingWriter
from tests.conftest import free_port
from yak.chaos.env import ChaosCluster, ClusterSpec
from yak.cluster.liveness_pings import api_versions_request

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret";')


class SaslInterBrokerCluster(ChaosCluster):
    """A chaos cluster whose brokers reach each other only over a SASL_PLAINTEXT listener
    `BROKER` (its port per node in `inter_port`); clients keep the PLAINTEXT port."""

    def __init__(self, spec: ClusterSpec) -> None:
        super().__init__(spec)
        self.inter_port = {n: free_port() for n in self.node_ids}

    def _broker_process(self, node: int):  # noqa: ANN202 (ChaosCluster's own type)
        h = self.host(node)
        self.spec.broker_settings.update({
            "listeners": f"PLAINTEXT://{h}:{self.kafka_port(node)},"
                         f"BROKER://{h}:{self.inter_port[node]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,BROKER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "BROKER",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.broker.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.broker.plain.sasl.jaas.config": JAAS,
        })
        return super()._broker_process(node)


def _start(tmp_path: Path) -> SaslInterBrokerCluster:
    cluster = SaslInterBrokerCluster(ClusterSpec(
        tmp_path / "cluster", brokers=3, session_timeout_ms=9000,
        broker_settings=dict(DEFAULTS)))
    cluster.start()
    try:  # a failed start must not leave the brokers running
        admin = cluster.admin()
        fs = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                           config={"min.insync.replicas": "2"})])
        for f in fs.values():
            f.result(30)
        _wait(lambda: len(_metadata(cluster)[1]) == PARTITIONS
              and all(leader > 0 and len(isr) == 3
                      for leader, isr in _metadata(cluster)[1].values()),
              60, "leaders and full ISRs (replication over SASL_PLAINTEXT)")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _frame(sock: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    size = struct.unpack(">i", head)[0]
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def _check_the_premise(port: int) -> None:
    """What the probe relies on, on the BROKER listener: ApiVersions answered before any
    SASL login, as often as asked (error code 0, the correlation ids echoed); anything else
    unauthenticated closes the connection unanswered."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for cid in (1, 2, 3):
            s.sendall(api_versions_request(cid))
            body = _frame(s)
            assert body is not None, f"ApiVersions {cid} before login: connection closed"
            got_cid, error = struct.unpack(">ih", body[:6])
            assert (got_cid, error) == (cid, 0), (got_cid, error)
        # Metadata v0 (key 3), unauthenticated: the gate closes the connection.
        client = b"yak-test"
        req = struct.pack(">hhih", 3, 0, 4, len(client)) + client + struct.pack(">i", 0)
        s.sendall(struct.pack(">i", len(req)) + req)
        assert _frame(s) is None, "a Metadata request before login was answered"


@pytest.mark.slow
def test_a_frozen_leader_is_fenced_over_a_sasl_plaintext_inter_broker_listener(
        tmp_path: Path) -> None:
    cluster = _start(tmp_path)
    writer: RefreshingWriter | None = None
    victim = -1
    try:
        partition, victim, controller = _victim(cluster)
        _check_the_premise(cluster.inter_port[victim])
        registered = f"broker {victim} registered, epoch"
        assert _log(cluster, victim).count(registered) == 1
        writer = RefreshingWriter(cluster.bootstrap, partition)
        writer.start()
        _wait(lambda: writer.acked() >= 200, 30, "200 acknowledged writes")
        # The probe judges only a broker that answered its pings once: a connection to the
        # SASL_PLAINTEXT listener must be a pinged one (liveness._pingable), not an idle one.
        probing = f"liveness: probing broker {victim} "
        _wait(lambda: probing in _log(cluster, controller), 30,
              "the controller's probe connected to the victim")
        lines = [ln for ln in _log(cluster, controller).splitlines() if probing in ln]
        assert all("a pinged connection" in ln for ln in lines), lines
        time.sleep(1.0)  # a few answers on that connection
        paused = time.monotonic()
        cluster.pause(victim)
        _wait(lambda: writer.first_ack_sent_after(paused) is not None, 30,
              "an ack of a write sent after the pause")
        first = writer.first_ack_sent_after(paused)
        assert first is not None
        took = first - paused
        verdicts = [line for line in _log(cluster, controller).splitlines()
                    if f"liveness: broker {victim}" in line and "frozen; fenced" in line]
        print(f"\nSASL_PLAINTEXT inter-broker listener: SIGSTOP of broker {victim} (leader of"
              f" partition {partition}, controller {controller}) -> first ack: {took:.2f} s;"
              f" verdict: {verdicts}")
        assert took < BOUND_S, f"first ack {took:.2f} s after the pause"
        assert len(verdicts) == 1, verdicts
        assert _metadata(cluster)[1][partition][0] not in (victim, -1)
        target = writer.acked() + 100
        _wait(lambda: writer.acked() >= target, 30, "100 more acks on the new leader")
        cluster.resume(victim)
        # SIGCONT: it finds its lease gone, registers anew, catches up over SASL, rejoins.
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
