"""One broker with every listener kind (PLAINTEXT, SSL with mTLS, SASL_SSL, SASL_PLAINTEXT),
driven by unmodified clients: confluent-kafka, kafka-python and kcat. Certificates are
made at test time with trustme; SCRAM users are created over the wire
(AlterUserScramCredentials) before they log in.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from security.conftest import JAAS_SCRAM, Certs, SecuredBroker, plain_users, start_secured
from security.wire import (
    SaslRaw,
    closed_unanswered,
    connect,
    consume,
    frame,
    produce,
    rdkafka,
)
from yak.protocol import kio_compat

LISTENERS = ["PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT"]
MAPPING = "RULE:^CN=([^,]+),OU=[^,]*,O=acme$/$1/"


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> SecuredBroker:
    d = tmp_path_factory.mktemp("listeners") / "data"
    d.mkdir()
    broker = start_secured(
        d, LISTENERS, certs,
        **{
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.ssl.principal.mapping.rules": MAPPING,
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config":
                plain_users(admin="admin-secret", alice="alice-secret", u="p"),
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS_SCRAM,
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256",
            # The authorizer only guards topics that have ACLs (see the mTLS test).
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
            "super.users": "User:admin",
        },
    )
    admin = AdminClient(rdkafka(broker.addr("PLAINTEXT")))
    ups = [UserScramCredentialUpsertion("scram256", ScramCredentialInfo(
               ScramMechanism.SCRAM_SHA_256, 4096), b"pw-256"),
           UserScramCredentialUpsertion("scram512", ScramCredentialInfo(
               ScramMechanism.SCRAM_SHA_512, 8192), b"pw-512")]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(15)
    yield broker
    broker.stop(10)


def _conf(b: SecuredBroker, certs: Certs, listener: str) -> dict:
    if listener == "PLAINTEXT":
        return rdkafka(b.addr(listener))
    if listener == "SSL":
        return rdkafka(b.addr(listener), "SSL", certs, client_cert=True)
    if listener == "SASL_SSL":
        return rdkafka(b.addr(listener), "SASL_SSL", certs, "SCRAM-SHA-512", "scram512",
                       "pw-512")
    return rdkafka(b.addr(listener), "SASL_PLAINTEXT", None, "SCRAM-SHA-256", "scram256",
                   "pw-256")


@pytest.mark.parametrize("listener", LISTENERS)
def test_every_listener_kind_serves_confluent_kafka(b, certs, listener):
    conf = _conf(b, certs, listener)
    topic = f"every-{listener.lower()}"
    assert produce(conf, topic, [b"one", b"two"]) == [None, None]
    assert consume(conf, topic, 2) == [b"one", b"two"]
    # Metadata answers with the endpoint of the listener the request came in on.
    md = AdminClient(conf).list_topics(timeout=10)
    assert [(x.host, x.port) for x in md.brokers.values()] == [
        ("127.0.0.1", b.listener_port[listener])]


def test_plain_login_over_sasl_ssl(b, certs):
    conf = rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "alice", "alice-secret")
    assert produce(conf, "plain-ssl", [b"x"]) == [None]


@pytest.mark.slow
def test_scram_256_over_sasl_plaintext_and_512_over_sasl_ssl_with_kafka_python(b, certs):
    from kafka import KafkaConsumer, KafkaProducer

    ctx = ssl.create_default_context(cafile=str(certs.ca))
    for addr, proto, mech, user, pw, extra in [
        (b.addr("SASL_PLAINTEXT"), "SASL_PLAINTEXT", "SCRAM-SHA-256", "scram256", "pw-256", {}),
        (b.addr("SASL_SSL"), "SASL_SSL", "SCRAM-SHA-512", "scram512", "pw-512",
         {"ssl_context": ctx}),
        (b.addr("SASL_SSL"), "SASL_SSL", "PLAIN", "alice", "alice-secret", {"ssl_context": ctx}),
    ]:
        kw = dict(bootstrap_servers=addr, security_protocol=proto, sasl_mechanism=mech,
                  sasl_plain_username=user, sasl_plain_password=pw, **extra)
        topic = f"kp-{mech.lower()}-{proto.lower()}"
        p = KafkaProducer(**kw)
        p.send(topic, b"from-kafka-python").get(timeout=20)
        p.close()
        c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **kw)
        assert [m.value for m in c] == [b"from-kafka-python"]
        c.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_over_ssl_mtls_sasl_ssl_and_sasl_plaintext(b, certs):
    runs = {
        "SSL": ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs.ca}",
                "-X", f"ssl.certificate.location={certs.alice_cert}",
                "-X", f"ssl.key.location={certs.alice_key}"],
        "SASL_SSL": ["-X", "security.protocol=sasl_ssl", "-X", f"ssl.ca.location={certs.ca}",
                     "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=scram512",
                     "-X", "sasl.password=pw-512"],
        "SASL_PLAINTEXT": ["-X", "security.protocol=sasl_plaintext",
                           "-X", "sasl.mechanisms=SCRAM-SHA-256",
                           "-X", "sasl.username=scram256", "-X", "sasl.password=pw-256"],
    }
    for listener, args in runs.items():
        topic = f"kcat-{listener.lower()}"
        base = ["kcat", "-b", b.addr(listener), *args]
        subprocess.run([*base, "-P", "-t", topic], input=b"hello\n", check=True, timeout=30)
        out = subprocess.run([*base, "-C", "-t", topic, "-e", "-q", "-f", "%s\n"],
                             capture_output=True, check=True, timeout=30)
        assert out.stdout == b"hello\n", (listener, out)


def test_wrong_password_is_refused_after_a_delay_then_closed(b):
    with SaslRaw(b.addr("SASL_PLAINTEXT")) as c:
        assert c.handshake("PLAIN").error_code == 33  # not enabled on this listener
    with SaslRaw(b.addr("SASL_PLAINTEXT")) as c:
        hs = c.handshake("SCRAM-SHA-256")
        assert hs.error_code == 0 and list(hs.mechanisms) == ["SCRAM-SHA-256"]
    # confluent-kafka with a wrong password: the error callback reports the failure.
    errors: list[KafkaError] = []
    conf = rdkafka(b.addr("SASL_PLAINTEXT"), "SASL_PLAINTEXT", None, "SCRAM-SHA-256",
                   "scram256", "wrong", error_cb=errors.append)
    from confluent_kafka import Producer

    p = Producer(conf)
    p.produce("never", b"x")
    p.flush(3)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("invalid credentials" in e.str() for e in errors), errors


def test_failed_plain_login_answer_is_delayed_and_closes(b, certs):
    with SaslRaw(b.addr("SASL_SSL"), certs.ca) as c:
        assert c.handshake("PLAIN").error_code == 0
        t0 = time.monotonic()
        r = c.authenticate(b"\0alice\0not-her-password")
        waited = time.monotonic() - t0
        assert r.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert r.error_message == "Authentication failed: Invalid username or password"
        assert waited >= 0.09  # connection.failed.authentication.delay.ms (100, grows per IP)
        assert c.is_closed_by_peer(5)


def test_before_login_only_sasl_and_api_versions_are_served(b, certs):
    with SaslRaw(b.addr("SASL_SSL"), certs.ca) as c:
        assert c.api_versions().error_code == 0
        mod = kio_compat.schema_module("metadata", 12, "request")
        req = mod.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
        assert closed_unanswered(c, req)
    # SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE, then closed.
    with SaslRaw(b.addr("SASL_PLAINTEXT")) as c:
        assert c.authenticate(b"n,,n=x,r=abc").error_code == 34
        assert c.is_closed_by_peer(5)
    # SaslHandshake on a listener without SASL: ILLEGAL_SASL_STATE.
    with SaslRaw(b.addr("PLAINTEXT")) as c:
        assert c.handshake("PLAIN").error_code == 34
    # Logged in, the same connection serves everything; a second SaslAuthenticate is 34.
    with SaslRaw(b.addr("SASL_SSL"), certs.ca) as c:
        assert c.login_plain("alice", "alice-secret").error_code == 0
        assert [x.port for x in c.metadata().brokers] == [b.listener_port["SASL_SSL"]]
        assert c.authenticate(b"\0alice\0alice-secret").error_code == 34


def test_sasl_v0_raw_plain_token_shorter_than_a_request_header(b, certs):
    """After SaslHandshake v0 the token is a bare frame; PLAIN for user u, password p is 4
    bytes, below the 8 a request needs, and Kafka has no minimum there."""
    with SaslRaw(b.addr("SASL_SSL"), certs.ca) as c:
        assert c.handshake("PLAIN", version=0).error_code == 0
        c.send_bytes(frame(b"\0u\0p"))
        assert c.recv_frame() == b""  # PLAIN's (empty) server token, also a bare frame
        assert [x.port for x in c.metadata().brokers] == [b.listener_port["SASL_SSL"]]
        # Logged in, frames are requests again: one shorter than a header closes it.
        c.send_bytes(frame(b"\0u\0p"))
        assert c.is_closed_by_peer(5)


def test_plaintext_bytes_on_a_tls_port_close_that_connection_only(b, certs):
    s = connect(b.addr("SASL_SSL"))
    s.sendall(b"\x00\x00\x00\x0a" + b"\x00" * 10)  # a Kafka frame, not a TLS record
    s.settimeout(10)
    closed = False
    try:
        while not closed:  # the TLS layer may send an alert first; then EOF
            closed = s.recv(100) == b""
    except ConnectionResetError:
        closed = True
    except TimeoutError:
        pass
    finally:
        s.close()
    assert closed, "a plaintext client on a TLS port was not closed"
    conf = rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "alice", "alice-secret")
    assert produce(conf, "after-garbage", [b"still serving"]) == [None]


@pytest.mark.slow
def test_a_tls_handshake_that_never_finishes_is_closed(b):
    s = connect(b.addr("SSL"), timeout=30)
    t0 = time.monotonic()
    try:
        s.settimeout(30)
        try:
            data = s.recv(1)
        except ConnectionResetError:
            data = b""
        assert data == b""
        assert time.monotonic() - t0 < 25  # yak closes after its 10 s handshake timeout
    finally:
        s.close()


def test_mtls_principal_is_the_mapped_certificate_subject(b, certs):
    """Only User:alice may use topic `alice-only`: the SSL client with alice's certificate
    (mapped from CN=alice,...,O=acme) may, an ANONYMOUS PLAINTEXT client may not."""
    admin = AdminClient(rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin",
                                "admin-secret"))
    acls = [AclBinding(ResourceType.TOPIC, "alice-only", ResourcePatternType.LITERAL,
                       "User:alice", "*", op, AclPermissionType.ALLOW)
            for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.CREATE)]
    acls.append(AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:alice",
                           "*", AclOperation.READ, AclPermissionType.ALLOW))
    for f in admin.create_acls(acls).values():
        f.result(15)
    ssl_conf = rdkafka(b.addr("SSL"), "SSL", certs, client_cert=True)
    assert produce(ssl_conf, "alice-only", [b"mine"]) == [None]
    assert consume(ssl_conf, "alice-only", 1) == [b"mine"]
    errs = produce(rdkafka(b.addr("PLAINTEXT"), **{"message.timeout.ms": 5000}), "alice-only",
                   [b"not yours"])
    assert errs[0] is not None and errs[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_client_certificate_that_maps_to_no_principal_is_closed(b, certs):
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(certs.stranger_cert), str(certs.stranger_key))
    with SaslRaw(b.addr("SSL")) as c:
        c.sock = ctx.wrap_socket(c.sock, server_hostname="127.0.0.1")
        assert c.is_closed_by_peer(5)
    # No certificate at all on a listener that requires one: the handshake fails.
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)), \
            SaslRaw(b.addr("SSL"), certs.ca) as c:
        c.api_versions()


def test_a_flood_of_failed_logins_does_not_slow_good_clients(b):
    addr = b.addr("SASL_PLAINTEXT")
    delays: list[float] = []

    def bad_login() -> None:
        with SaslRaw(addr, timeout=30) as c:
            assert c.handshake("SCRAM-SHA-256").error_code == 0
            from yak.security.client import ClientSecurity

            step = ClientSecurity.from_properties({
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "scram256", "sasl.password": "guess"}).sasl_exchange()
            first = c.authenticate(step(None))
            t0 = time.monotonic()
            r = c.authenticate(step(bytes(first.auth_bytes)))
            delays.append(time.monotonic() - t0)
            assert r.error_code == 58

    threads = [threading.Thread(target=bad_login) for _ in range(12)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    conf = rdkafka(addr, "SASL_PLAINTEXT", None, "SCRAM-SHA-256", "scram256", "pw-256")
    assert produce(conf, "flood", [b"%d" % i for i in range(50)]) == [None] * 50
    good = time.monotonic() - t0
    for t in threads:
        t.join(60)
    assert len(delays) == 12
    # Failures from one IP are answered ever later (doubling, capped at 5 s) ...
    assert max(delays) >= 1.0 > min(delays)
    # ... while a good client on the same IP is not held back by them.
    assert good < max(delays)


def test_secrets_stay_out_of_describe_configs_and_logs(b, certs):
    admin = AdminClient(rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin",
                                "admin-secret"))
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([res])[res].result(15)
    jaas = configs["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None
    assert configs["ssl.keystore.location"].value == str(certs.broker)
    log = Path(b.log_path).read_text(errors="replace")
    assert "authentication failed" in log.lower()  # the failed logins above were logged
    for secret in ("admin-secret", "alice-secret", "pw-256", "pw-512", "not-her-password"):
        assert secret not in log
