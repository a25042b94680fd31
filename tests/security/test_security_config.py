"""The start-up check of all security settings together: a Kafka-style server.properties
for a broker with PLAINTEXT, SSL (mTLS), SASL_SSL and SASL_PLAINTEXT listeners."""

from __future__ import annotations

import ssl

import pytest
import trustme

from yak.config import ConfigError, parse_properties
from yak.security.security_config import SecurityConfig


@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    (d / "broker.pem").write_bytes(
        cert.private_key_pem.bytes()
        + b"".join(b.bytes() for b in cert.cert_chain_pems)
        + ca.cert_pem.bytes()
    )
    (d / "ca.pem").write_bytes(ca.cert_pem.bytes())
    return d


PROPS = """
listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094,SASL_PLAINTEXT://127.0.0.1:9095
advertised.listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094,SASL_PLAINTEXT://127.0.0.1:9095
ssl.keystore.type=PEM
ssl.keystore.location={d}/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location={d}/ca.pem
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\
    user_admin="admin-secret" user_alice="alice-secret";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-256
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:CN=broker,O=acme
"""


def test_a_kafka_server_properties_with_every_listener_kind(pem):
    cfg = SecurityConfig.from_settings(parse_properties(PROPS.format(d=pem)))
    by = cfg.by_listener
    assert by["PLAINTEXT"].ssl_context is None and by["PLAINTEXT"].sasl is None
    assert by["SSL"].ssl_context.verify_mode == ssl.CERT_REQUIRED and by["SSL"].sasl is None
    assert by["SASL_SSL"].ssl_context.verify_mode == ssl.CERT_NONE
    assert by["SASL_SSL"].sasl.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert set(by["SASL_SSL"].sasl.plain_users) == {"admin", "alice"}
    assert by["SASL_PLAINTEXT"].ssl_context is None
    assert by["SASL_PLAINTEXT"].sasl.enabled_mechanisms == ("SCRAM-SHA-256",)
    assert cfg.authorizer_enabled and cfg.failed_authentication_delay_ms == 100
    assert "admin-secret" not in repr(cfg)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer"},
            "authorizer.class.name",
        ),
        ({"super.users": "admin"}, "super.users"),
        ({"allow.everyone.if.no.acl.found": "yes"}, "allow.everyone.if.no.acl.found"),
        ({"principal.builder.class": "com.example.Builder"}, "principal.builder.class"),
        ({"quota.window.num": "0"}, "quota.window.num"),
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
        (
            {"listener.name.sasl_ssl.plain.sasl.jaas.config": None},
            "listener.name.sasl_ssl.plain.sasl.jaas.config is required",
        ),
        (
            {
                "security.inter.broker.protocol": "SASL_SSL",
                "sasl.mechanism.inter.broker.protocol": "GSSAPI",
            },
            "sasl.mechanism.inter.broker.protocol must be included",
        ),
    ],
)
def test_bad_security_settings_stop_start_up_with_one_line(pem, change, message):
    settings = parse_properties(PROPS.format(d=pem))
    for k, v in change.items():
        if v is None:
            settings.pop(k)
        else:
            settings[k] = v
    with pytest.raises(ConfigError) as exc:
        SecurityConfig.from_settings(settings)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert "admin-secret" not in str(exc.value)
